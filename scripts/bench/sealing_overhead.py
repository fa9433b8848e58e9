#!/usr/bin/env python3
"""What sealing costs `runner exec`: the same job sealed (inputs encrypted to the runner, outputs to
a recipient) and in plaintext, alternating, medians of whole `exec` wall times.

    scripts/bench/sealing_overhead.py --model DIR [--inputs 256] [--prompt-len 32] [--new-tokens 4]
        [--batch 32] [--rounds 5] [--runner target/release/runner]

Sets up a scratch directory (`runner init`, an owner key, a recipient made with `age-keygen`, the
shipped policy with sealing optional so one engine, policy and model serve both, and two
certificates: one naming the recipient, one naming none), writes `--inputs` token prompts, seals a
copy with `age -r`, then runs exec on the two jobs in turn, `--rounds` times. Prints each job's
median and the difference. Needs `age` and `age-keygen` (scripts/install_age.sh).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(cmd: list[str], cwd: Path) -> str:
    out = subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--inputs", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runner", default=str(ROOT / "target/release/runner"))
    args = p.parse_args()
    runner = str(Path(args.runner).resolve())
    model = str(Path(args.model).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "keys").mkdir()
        shutil.copy(ROOT / "engines/gemma3.eng", d / "gemma3.eng")
        policy = json.loads((ROOT / "policies/gemma3.json").read_text())
        policy["sealing"] = {"inputs": "optional", "outputs": "optional"}
        policy["limits"]["max_inputs"] = max(policy["limits"]["max_inputs"], args.inputs)
        (d / "policy.json").write_text(json.dumps(policy))
        run([runner, "init", "--state-dir", "state"], d)
        run([runner, "keygen", "--out", "keys/owner.key"], d)
        run(["age-keygen", "-o", "keys/recipient.age"], d)
        recipient = run(["age-keygen", "-y", "keys/recipient.age"], d).strip()
        runner_recipient = run([runner, "identity", "--state-dir", "state", "--recipient"], d).strip()
        (d / "trust.toml").write_text('required_signatures = 1\nowners = ["keys/owner.key.pub"]\n')
        approve = [runner, "approve", "--engine", "gemma3.eng", "--policy", "policy.json", "--model", model,
                   "--key", "keys/owner.key"]
        run(approve + ["--out", "cert-plain.json"], d)
        run(approve + ["--out", "cert-sealed.json", "--recipient", recipient], d)
        vocab = json.loads((Path(model) / "config.json").read_text()).get("vocab_size", 512)
        lines = []
        for i in range(args.inputs):
            toks = [2] + [3 + (i * 131 + j * 17) % (vocab - 3) for j in range(args.prompt_len - 1)]
            lines.append(json.dumps({"id": f"in{i}", "tokens": toks}))
        (d / "inputs.jsonl").write_text("\n".join(lines) + "\n")
        run(["age", "-r", runner_recipient, "-o", "inputs.jsonl.age", "inputs.jsonl"], d)
        for name, inputs in [("plain", "inputs.jsonl"), ("sealed", "inputs.jsonl.age")]:
            (d / f"job-{name}.toml").write_text(
                f'engine = "gemma3.eng"\nmodel = "{model}"\ninputs = "{inputs}"\noutput_dir = "out-{name}"\n'
                f'[generation]\nbatch_size = {args.batch}\nmax_new_tokens = {args.new_tokens}\n'
                f'outputs = ["tokens"]\n')
        times: dict[str, list[float]] = {"plain": [], "sealed": []}
        for r in range(args.rounds):
            for name in ["plain", "sealed"]:
                shutil.rmtree(d / f"out-{name}", ignore_errors=True)
                t = time.perf_counter()
                run([runner, "exec", "--cert", f"cert-{name}.json", "--trust", "trust.toml", "--state-dir", "state",
                     "--quiet", f"job-{name}.toml"], d)
                times[name].append(time.perf_counter() - t)
        sizes = {n: (d / f).stat().st_size for n, f in [("plain", "inputs.jsonl"), ("sealed", "inputs.jsonl.age")]}
        cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                    if l.startswith("model name")), "unknown CPU")
        print(f"machine: {cpu}; {args.inputs} inputs of {args.prompt_len} tokens, {args.new_tokens} new tokens, "
              f"batch {args.batch}; medians of {args.rounds} alternating rounds of whole `runner exec` runs")
        for name in ["plain", "sealed"]:
            print(f"  {name:7} inputs file {sizes[name]:>9} bytes  exec {statistics.median(times[name]):.3f} s "
                  f"(runs: {', '.join(f'{t:.3f}' for t in times[name])})")
        diff = statistics.median(times["sealed"]) - statistics.median(times["plain"])
        print(f"  sealing costs {diff * 1000:+.1f} ms per exec "
              f"({diff / statistics.median(times['plain']) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
