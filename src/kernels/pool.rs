//! The kernels' worker threads: one job at a time, run by the calling thread and up to all the
//! workers at once, which stay awake for a short while between jobs.
//!
//! Why not a general-purpose pool: a decode step is a few hundred kernel calls, each a job of
//! 0.05-5 ms separated by a few to a hundred microseconds of serial work. A worker that falls
//! asleep in such a gap costs the next call a wake-up, and in a VM a wake-up is an
//! inter-processor interrupt through the hypervisor, tens of microseconds: enough that a
//! small parallel call ran slower on two threads than on one, paid about 180 times per
//! batch-1 decode step of the 1b model (docs/performance.md, "What changed the numbers"). Here
//! workers spin for [`SPIN`] after each job before they park, and the caller spins (not
//! sleeps) until its helpers are done.
//!
//! One caller at a time: a thread that finds the pool in use runs its job alone, which gives
//! the same results (jobs split only independent outputs) and cannot deadlock.
#![allow(unsafe_code)]

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// How long an idle worker keeps polling for the next job before it parks.
pub(super) const SPIN: Duration = Duration::from_micros(500);

/// A job with its lifetime erased (see the `SAFETY` notes in [`Pool::run`]).
#[derive(Clone, Copy)]
struct JobPtr(*const (dyn Fn() + Sync + 'static));

// SAFETY: the pointee is `Sync`, so calling it from another thread is allowed; the pointer is
// only dereferenced while the caller of `Pool::run` keeps the job alive.
unsafe impl Send for JobPtr {}

/// The current job, read by workers under the lock.
struct Slot {
    /// Bumped for every job.
    epoch: u64,
    /// Workers `0..wanted` take part in this job.
    wanted: usize,
    job: Option<JobPtr>,
}

struct Shared {
    slot: Mutex<Slot>,
    /// Wakes parked workers when `slot.epoch` changes.
    wake: Condvar,
    /// `slot.epoch`, for spinning workers to poll without the lock.
    epoch: AtomicU64,
    /// Wanted workers that have not finished the current job.
    remaining: AtomicUsize,
    /// A worker's share of the current job panicked.
    panicked: AtomicBool,
}

/// Worker threads plus the lock that makes callers take turns.
pub(super) struct Pool {
    shared: Arc<Shared>,
    workers: usize,
    busy: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The slot is plain data, valid after any panic (none happens while it is held).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    /// Start `workers` threads (fewer if the system refuses some; `None` if it refuses all).
    pub(super) fn start(workers: usize) -> Option<Pool> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot {
                epoch: 0,
                wanted: 0,
                job: None,
            }),
            wake: Condvar::new(),
            epoch: AtomicU64::new(0),
            remaining: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
        });
        let mut started = 0;
        for index in 0..workers {
            let s = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("runner-kernel-{index}"))
                .spawn(move || work(&s, index));
            if spawned.is_err() {
                break;
            }
            started += 1;
        }
        (started > 0).then(|| Pool {
            shared,
            workers: started,
            busy: Mutex::new(()),
        })
    }

    /// Run `job` on this thread and, at the same time, on up to `helpers` workers; return when
    /// every one of them has returned. If the pool is in use by another thread, or `helpers`
    /// is 0, `job` runs once, here. A panic in any share is raised here, after all are done.
    pub(super) fn run(&self, helpers: usize, job: &(dyn Fn() + Sync)) {
        let helpers = helpers.min(self.workers);
        let busy = match self.busy.try_lock() {
            _ if helpers == 0 => None,
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        let Some(_busy) = busy else {
            job();
            return;
        };
        let s = &*self.shared;
        // SAFETY: only the lifetime is erased. Workers dereference the pointer only for this
        // epoch's share, and `Finish` below (which also runs if `job` panics here) returns only
        // once every wanted worker has finished that share, before `job` can go out of scope.
        let erased: JobPtr = JobPtr(unsafe {
            std::mem::transmute::<*const (dyn Fn() + Sync + '_), *const (dyn Fn() + Sync + 'static)>(
                job,
            )
        });
        {
            let mut slot = lock(&s.slot);
            slot.epoch += 1;
            slot.wanted = helpers;
            slot.job = Some(erased);
            s.remaining.store(helpers, Ordering::SeqCst);
            s.epoch.store(slot.epoch, Ordering::SeqCst);
            s.wake.notify_all();
        }
        struct Finish<'a>(&'a Shared);
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                let start = Instant::now();
                while self.0.remaining.load(Ordering::SeqCst) > 0 {
                    if start.elapsed() < SPIN {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                lock(&self.0.slot).job = None;
            }
        }
        let finish = Finish(s);
        job();
        drop(finish);
        if s.panicked.swap(false, Ordering::SeqCst) {
            panic!("a kernel task panicked on a worker thread");
        }
    }
}

/// A worker: wait for each new job, take part if wanted, count itself done.
fn work(s: &Shared, index: usize) {
    let mut seen = 0u64;
    loop {
        let spin_start = Instant::now();
        while s.epoch.load(Ordering::SeqCst) == seen && spin_start.elapsed() < SPIN {
            std::hint::spin_loop();
        }
        let (epoch, wanted, job) = {
            let mut slot = lock(&s.slot);
            while slot.epoch == seen {
                slot = s.wake.wait(slot).unwrap_or_else(|e| e.into_inner());
            }
            (slot.epoch, slot.wanted, slot.job)
        };
        seen = epoch;
        if index >= wanted {
            continue;
        }
        if let Some(JobPtr(job)) = job {
            // SAFETY: this worker is wanted in `epoch`, so the caller of `run` is waiting for
            // it (`remaining` counts it) and keeps the job alive until the decrement below.
            let ran = panic::catch_unwind(AssertUnwindSafe(|| unsafe { (*job)() }));
            if ran.is_err() {
                s.panicked.store(true, Ordering::SeqCst);
            }
        }
        s.remaining.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_shares(pool: &Pool, helpers: usize) -> usize {
        let shares = AtomicUsize::new(0);
        pool.run(helpers, &|| {
            shares.fetch_add(1, Ordering::SeqCst);
        });
        shares.into_inner()
    }

    #[test]
    fn every_wanted_worker_and_the_caller_run_the_job_once() {
        let pool = Pool::start(3).expect("threads");
        for round in 0..200 {
            let helpers = round % 5;
            assert_eq!(
                count_shares(&pool, helpers),
                1 + helpers.min(3),
                "round {round}"
            );
        }
        // After the workers have parked.
        std::thread::sleep(SPIN * 4);
        assert_eq!(count_shares(&pool, 2), 3);
    }

    #[test]
    fn a_busy_pool_runs_other_callers_jobs_on_their_own_thread() {
        let pool = Pool::start(1).expect("threads");
        let inner = AtomicUsize::new(0);
        pool.run(1, &|| {
            // Nested: the pool is taken, so this runs once, here.
            inner.fetch_add(count_shares(&pool, 1), Ordering::SeqCst);
        });
        // The caller's share and the worker's each ran the nested job alone.
        assert_eq!(inner.into_inner(), 2);
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        total.fetch_add(count_shares(&pool, 1), Ordering::SeqCst);
                    }
                });
            }
        });
        let total = total.into_inner();
        assert!((400..=800).contains(&total), "{total}");
    }

    #[test]
    fn a_panic_on_a_worker_is_raised_in_the_caller_and_the_pool_still_works() {
        let pool = Pool::start(1).expect("threads");
        let caller = std::thread::current().id();
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            pool.run(1, &|| {
                if std::thread::current().id() != caller {
                    panic!("worker share fails");
                }
            })
        }));
        assert!(result.is_err());
        assert_eq!(count_shares(&pool, 1), 2);
        // The caller's own share panicking: it still waits for the worker's before unwinding.
        let worker_done = AtomicBool::new(false);
        let result = panic::catch_unwind(AssertUnwindSafe(|| {
            pool.run(1, &|| {
                if std::thread::current().id() == caller {
                    panic!("caller share fails");
                }
                std::thread::sleep(Duration::from_millis(20));
                worker_done.store(true, Ordering::SeqCst);
            })
        }));
        assert!(result.is_err());
        assert!(
            worker_done.load(Ordering::SeqCst),
            "returned before the worker finished"
        );
        assert_eq!(count_shares(&pool, 1), 2);
    }
}
