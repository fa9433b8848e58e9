//! The values an engine computes with, and their types.
//!
//! Inputs come from the runner as named [`Value`]s bound to the entry function's parameters:
//! f32 tensors, scalars, id lists (token ids, positions), weight views, records of named
//! fields, stacks (the per-layer records `scan` walks), and per-layer mutable state such as a
//! KV cache. Tensors, records and stacks sit behind `Arc`, so passing them around, and handing
//! each layer's record to a scan body, never copies weights or activations.
//!
//! A [`Type`] is what the compiler knows about a value: its kind, and for tensors and weights
//! the dimensions known in advance. The type of an input generalises its value (a tensor's
//! dimensions, an id list's length are left open) so one plan serves every step of a job.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::kernels::{DType, KvCache, Tensor, Weight};

/// A value.
#[derive(Clone)]
#[non_exhaustive]
pub enum Value {
    /// A number (literals, config values such as `eps` or a rope base).
    Scalar(f64),
    /// An f32 activation.
    Tensor(Arc<Tensor>),
    /// A read-only view of stored weight bytes.
    Weight(Weight),
    /// A list of non-negative integers: token ids, positions, pad counts.
    Ids(Arc<[u32]>),
    /// Named fields.
    Record(Arc<Record>),
    /// A list of values of one type, walked by `scan` (the model's layers).
    Stack(Arc<[Value]>),
    /// Mutable per-layer state a built-in updates in place.
    State(StateHandle),
}

impl Value {
    /// A tensor value.
    pub fn tensor(t: Tensor) -> Value {
        Value::Tensor(Arc::new(t))
    }
    /// An id list value.
    pub fn ids(ids: impl Into<Arc<[u32]>>) -> Value {
        Value::Ids(ids.into())
    }
    /// A record value.
    pub fn record(r: Record) -> Value {
        Value::Record(Arc::new(r))
    }
    /// A stack value.
    pub fn stack(items: Vec<Value>) -> Value {
        Value::Stack(items.into())
    }
    /// A KV-cache state value.
    pub fn kv_cache(cache: KvCache) -> Value {
        Value::State(StateHandle::new(State::Kv(cache)))
    }

    /// The value's kind in words, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Scalar(_) => "a scalar",
            Value::Tensor(_) => "a tensor",
            Value::Weight(_) => "a weight",
            Value::Ids(_) => "an id list",
            Value::Record(_) => "a record",
            Value::Stack(_) => "a stack",
            Value::State(s) => s.kind().describe(),
        }
    }

    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// The scalar, if this is one.
    pub fn as_scalar(&self) -> Option<f64> {
        match self {
            Value::Scalar(s) => Some(*s),
            _ => None,
        }
    }

    /// The id list, if this is one.
    pub fn as_ids(&self) -> Option<&[u32]> {
        match self {
            Value::Ids(v) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Scalar(s) => write!(f, "Scalar({s})"),
            Value::Tensor(t) => write!(f, "{t:?}"),
            Value::Weight(w) => write!(f, "{w:?}"),
            Value::Ids(v) => write!(f, "Ids[{}]", v.len()),
            Value::Record(r) => write!(f, "{r:?}"),
            Value::Stack(s) => write!(f, "Stack[{}]", s.len()),
            Value::State(s) => write!(f, "State({})", s.kind().describe()),
        }
    }
}

/// Named fields, in name order.
#[derive(Clone, Default)]
pub struct Record {
    fields: BTreeMap<String, Value>,
}

impl Record {
    /// An empty record.
    pub fn new() -> Record {
        Record::default()
    }
    /// Add (or replace) a field, builder style.
    pub fn with(mut self, name: impl Into<String>, value: Value) -> Record {
        self.fields.insert(name.into(), value);
        self
    }
    /// Add (or replace) a field.
    pub fn insert(&mut self, name: impl Into<String>, value: Value) -> Option<Value> {
        self.fields.insert(name.into(), value)
    }
    /// A field.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.get(name)
    }
    /// The fields, in name order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v))
    }
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.fields.iter()).finish()
    }
}

/// Mutable per-layer state.
#[non_exhaustive]
pub enum State {
    /// A layer's attention KV cache.
    Kv(KvCache),
}

/// The kinds of [`State`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StateKind {
    /// [`State::Kv`].
    Kv,
}

impl StateKind {
    fn describe(self) -> &'static str {
        match self {
            StateKind::Kv => "a KV cache",
        }
    }
}

impl State {
    /// The KV cache, if this is one.
    pub fn as_kv(&self) -> Option<&KvCache> {
        match self {
            State::Kv(c) => Some(c),
        }
    }
    /// The KV cache, mutable, if this is one.
    pub fn as_kv_mut(&mut self) -> Option<&mut KvCache> {
        match self {
            State::Kv(c) => Some(c),
        }
    }
    /// Its kind.
    pub fn kind(&self) -> StateKind {
        match self {
            State::Kv(_) => StateKind::Kv,
        }
    }
}

/// A shared handle to mutable state. Records hold handles, so a layer's `layer.cache` reaches
/// the same cache on every step; the built-in that takes it locks it for the call.
#[derive(Clone)]
pub struct StateHandle {
    kind: StateKind,
    inner: Arc<Mutex<State>>,
}

impl StateHandle {
    /// A handle to new state.
    pub fn new(state: State) -> StateHandle {
        StateHandle {
            kind: state.kind(),
            inner: Arc::new(Mutex::new(state)),
        }
    }
    /// Its kind.
    pub fn kind(&self) -> StateKind {
        self.kind
    }
    /// Lock it. A poisoned lock (a panic while held) still yields the state: kernels report
    /// errors instead of panicking, so the state is whole.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A dimension: known in advance, or only at run time.
pub type Dim = Option<usize>;

/// What the compiler knows about a value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Type {
    /// A scalar.
    Scalar,
    /// A tensor of this rank, some dimensions known.
    Tensor(Vec<Dim>),
    /// A weight of this rank, some dimensions known, and its dtype when every value this type
    /// covers shares one (a GGUF model's layers mix block formats; every kernel reads them all).
    Weight(Option<DType>, Vec<Dim>),
    /// An id list.
    Ids,
    /// A record with these fields.
    Record(BTreeMap<String, Type>),
    /// A stack of `len` values of one type.
    Stack(usize, Box<Type>),
    /// Mutable state.
    State(StateKind),
}

fn dims(d: &[Dim]) -> String {
    let parts: Vec<String> = d
        .iter()
        .map(|d| d.map_or_else(|| "?".to_owned(), |n| n.to_string()))
        .collect();
    format!("[{}]", parts.join(", "))
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Scalar => f.write_str("a scalar"),
            Type::Tensor(d) => write!(f, "a tensor {}", dims(d)),
            Type::Weight(Some(dt), d) => write!(f, "a {dt} weight {}", dims(d)),
            Type::Weight(None, d) => write!(f, "a weight {}", dims(d)),
            Type::Ids => f.write_str("an id list"),
            Type::Record(fields) => {
                let names: Vec<&str> = fields.keys().map(String::as_str).collect();
                write!(f, "a record {{{}}}", names.join(", "))
            }
            Type::Stack(n, t) => write!(f, "a stack of {n} ({t})"),
            Type::State(k) => f.write_str(k.describe()),
        }
    }
}

impl Type {
    /// The type of an input value, generalised: tensor dimensions and id-list lengths are left
    /// open; weights keep their shape; a stack's element type joins its elements' types.
    pub fn of(value: &Value) -> Result<Type, String> {
        Ok(match value {
            Value::Scalar(_) => Type::Scalar,
            Value::Tensor(t) => Type::Tensor(vec![None; t.shape().len()]),
            Value::Weight(w) => Type::Weight(
                Some(w.dtype()),
                w.shape().iter().map(|&d| Some(d)).collect(),
            ),
            Value::Ids(_) => Type::Ids,
            Value::Record(r) => Type::Record(
                r.fields()
                    .map(|(k, v)| {
                        Type::of(v)
                            .map(|t| (k.to_owned(), t))
                            .map_err(|e| format!("{k}: {e}"))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Value::Stack(items) => {
                let mut elem: Option<Type> = None;
                for (i, v) in items.iter().enumerate() {
                    let t = Type::of(v).map_err(|e| format!("[{i}]: {e}"))?;
                    elem = Some(match elem {
                        None => t,
                        Some(prev) => prev.join(&t).ok_or_else(|| {
                            format!("element {i} is {t}, unlike element 0 ({prev})")
                        })?,
                    });
                }
                let elem = elem.ok_or_else(|| "a stack must not be empty".to_owned())?;
                Type::Stack(items.len(), Box::new(elem))
            }
            Value::State(s) => Type::State(s.kind()),
        })
    }

    /// The most precise type covering both, or `None` when their kinds differ.
    pub fn join(&self, other: &Type) -> Option<Type> {
        let join_dims = |a: &[Dim], b: &[Dim]| -> Option<Vec<Dim>> {
            (a.len() == b.len()).then(|| {
                a.iter()
                    .zip(b)
                    .map(|(x, y)| if x == y { *x } else { None })
                    .collect()
            })
        };
        Some(match (self, other) {
            (Type::Scalar, Type::Scalar) => Type::Scalar,
            (Type::Ids, Type::Ids) => Type::Ids,
            (Type::Tensor(a), Type::Tensor(b)) => Type::Tensor(join_dims(a, b)?),
            (Type::Weight(da, a), Type::Weight(db, b)) => {
                Type::Weight(if da == db { *da } else { None }, join_dims(a, b)?)
            }
            (Type::Record(a), Type::Record(b)) => {
                if a.len() != b.len() {
                    return None;
                }
                let mut out = BTreeMap::new();
                for ((ka, ta), (kb, tb)) in a.iter().zip(b) {
                    if ka != kb {
                        return None;
                    }
                    out.insert(ka.clone(), ta.join(tb)?);
                }
                Type::Record(out)
            }
            (Type::Stack(na, a), Type::Stack(nb, b)) if na == nb => {
                Type::Stack(*na, Box::new(a.join(b)?))
            }
            (Type::State(a), Type::State(b)) if a == b => Type::State(*a),
            _ => return None,
        })
    }

    /// Whether `value` has this type; the reason when it does not.
    pub fn admits(&self, value: &Value) -> Result<(), String> {
        let fits = |want: &[Dim], got: &[usize]| {
            want.len() == got.len() && want.iter().zip(got).all(|(w, g)| w.is_none_or(|w| w == *g))
        };
        let ok = match (self, value) {
            (Type::Scalar, Value::Scalar(_)) | (Type::Ids, Value::Ids(_)) => true,
            (Type::Tensor(d), Value::Tensor(t)) => fits(d, t.shape()),
            (Type::Weight(dt, d), Value::Weight(w)) => {
                dt.is_none_or(|dt| dt == w.dtype()) && fits(d, w.shape())
            }
            (Type::Record(fields), Value::Record(r)) => {
                if r.fields().count() != fields.len() {
                    return Err(format!("a record with fields {{{}}}", field_names(r)));
                }
                for (name, t) in fields {
                    let v = r
                        .get(name)
                        .ok_or_else(|| format!("a record without field `{name}`"))?;
                    t.admits(v).map_err(|e| format!("field `{name}`: {e}"))?;
                }
                true
            }
            (Type::Stack(n, t), Value::Stack(items)) => {
                if items.len() != *n {
                    return Err(format!("a stack of {}", items.len()));
                }
                for (i, v) in items.iter().enumerate() {
                    t.admits(v).map_err(|e| format!("[{i}]: {e}"))?;
                }
                true
            }
            (Type::State(k), Value::State(s)) => *k == s.kind(),
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(describe_value(value))
        }
    }
}

fn field_names(r: &Record) -> String {
    r.fields().map(|(k, _)| k).collect::<Vec<_>>().join(", ")
}

fn describe_value(v: &Value) -> String {
    match v {
        Value::Tensor(t) => format!("a tensor {:?}", t.shape()),
        Value::Weight(w) => format!("a {:?} weight {:?}", w.dtype(), w.shape()),
        other => other.kind().to_owned(),
    }
}

/// Named inputs for the entry function.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    values: BTreeMap<String, Value>,
}

impl Inputs {
    /// No inputs.
    pub fn new() -> Inputs {
        Inputs::default()
    }
    /// Add an input, builder style.
    pub fn with(mut self, name: impl Into<String>, value: Value) -> Inputs {
        self.values.insert(name.into(), value);
        self
    }
    /// Add (or replace) an input.
    pub fn insert(&mut self, name: impl Into<String>, value: Value) -> Option<Value> {
        self.values.insert(name.into(), value)
    }
    /// An input.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }
    /// The input names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }
    /// The types of the inputs, which a plan is compiled for.
    pub fn signature(&self) -> Result<Signature, InputError> {
        let mut types = BTreeMap::new();
        for (k, v) in &self.values {
            let t = Type::of(v).map_err(|why| InputError {
                name: k.clone(),
                why,
            })?;
            types.insert(k.clone(), t);
        }
        Ok(Signature { types })
    }
}

/// An input that has no type: a stack whose elements differ, or an empty stack.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("input `{name}` is not a well-formed value: {why}")]
pub struct InputError {
    /// The input.
    pub name: String,
    /// What is wrong, with the path inside it (e.g. `layers: element 3 is ...`).
    pub why: String,
}

impl crate::error::Diagnose for InputError {
    fn exit(&self) -> crate::error::Exit {
        crate::error::Exit::BadInput
    }
    fn hint(&self) -> Option<String> {
        Some("every layer record of a stack must have the same fields and kinds".into())
    }
}

/// The types of the entry function's inputs, by name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signature {
    types: BTreeMap<String, Type>,
}

impl Signature {
    /// No inputs.
    pub fn new() -> Signature {
        Signature::default()
    }
    /// Add an input type, builder style.
    pub fn with(mut self, name: impl Into<String>, t: Type) -> Signature {
        self.types.insert(name.into(), t);
        self
    }
    /// An input's type.
    pub fn get(&self, name: &str) -> Option<&Type> {
        self.types.get(name)
    }
    /// The input names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.types.keys().map(String::as_str)
    }
}
