#!/usr/bin/env bash
# The gateway under abuse and overload: `loadtest abuse` starts a real cloud-gateway process
# (tiny model behind a simulated cost close to the 1.5B's on these cores: 60 ms per batch,
# 18 ms per token of prefill) and runs the hostile probe's scenarios against it from
# 127.0.0.1 — id squatting (dev mode), ids claimed without their per-device tokens (a gateway
# with --device-token-secret), an invented-id session flood followed by a new device,
# unfinished streams pinning memory, an idle-connection flood, a huge Full from a device that
# leaves, sustained overload, and a signed bundle downloaded during that overload — while a
# well-behaved device escalates from 127.0.0.2. After each: the well-behaved device's
# escalations served within their deadline, gateway RSS against its baseline, Busy against
# expired. Prints a Markdown table; the JSON report goes to $OUT.
#
# Usage: deploy/bench/abuse.sh [loadtest abuse flags]   (e.g. --scenarios overload,huge-full)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
out="${OUT:-$(mktemp -d -t duet-abuse-XXXXXX)}"
mkdir -p "$out"

say() { echo "[abuse $(date +%H:%M:%S)] $*" >&2; }

cargo build --release -q --locked -p loadtest -p cloud-gateway
say "report in $out; machine: $(nproc) cores, $(uptime | sed 's/.*load/load/')"
target/release/loadtest --log error abuse --out "$out/abuse.json" "$@" >/dev/null

python3 - "$out/abuse.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
g = r.pop("gateway")
print(f"baseline RSS {g['rss_baseline_mb']:.0f} MB; well-behaved device {g['probe_baseline']['served_within_deadline']}/{g['probe_baseline']['escalations']} within deadline, p50 {g['probe_baseline']['p50_ms']:.0f} ms")
print()
print("| scenario | what the abuse got | RSS base → peak → after (MB) | back near base after | well-behaved device during | after (within deadline, p50) | ready after |")
print("|---|---|---|---|---|---|---|")
def got(name, s):
    if "error" in s: return "error: " + s["error"]
    if name == "squat": return f"{s['accepted']} of {s['claims']} ids claimed ({s['claims_per_s']:.0f}/s), {s['refused']} refused"
    if name == "claim": return f"{s['accepted']} of {s['claims']} claims without the id's token accepted ({s['claims_per_s']:.0f}/s); the device's own connection kept: {s['device_connection_kept']}"
    if name == "session-flood":
        nd = s["new_device_first_escalation"]
        first = nd.get("connect_error") or f"{nd['answer']}, then {' '.join(nd['answers'][1:]) or 'nothing more'} ({nd['until_last_ms']:.0f} ms)"
        return f"{s['sessions_held_peak']:.0f} sessions held of {s['attempted_sessions']} tried; {s['evicted']:.0f} evicted; {s['refused_too_many_sessions']} refused; a new device's first escalation: {first}; {s['sessions_after']:.0f} left after idle expiry"
    if name == "unfinished-streams": return f"{s['streams_opened']} partial streams ({s['bytes_sent_mb']:.0f} MB sent); RSS while held {s['rss_while_held_mb']:.0f} MB, after read timeout {s['rss_after_read_timeout_mb']:.0f} MB; {s['streams_given_up']:.0f} streams reset"
    if name == "idle-flood": return f"{s['accepted']} of {s['attempted']} connections accepted, {s['refused']} refused"
    if name == "huge-full": return "; ".join(f"{k}: {v['reply']} ({v['after_ms']:.0f} ms)" for k, v in s["attackers"].items()) + f"; {s['cancelled_at_gateway']:.0f} cancelled"
    if name == "overload":
        a = s["answers"]
        return f"{s['sessions']} sessions, {s['secs']} s: {a['token']} tokens, {a['busy']} Busy, {a['expired']} expired, {a['late']} answers late (latest {a['latest_after_deadline_ms']:.0f} ms after deadline); not ready {s['not_ready_s']:.1f} s (first at {s['first_not_ready_s']}); ready and idle {s['ready_and_idle_after_stop_s']} s after stop"
    if name == "bundle-flood":
        a, d = s["flood"]["answers"], s["during_flood"]
        fetched = ", ".join(f"{f['ms']:.0f} ms" if f["accepted"] else "failed: " + (f["error"] or "")[:60] for f in d)
        chunks = max(f["chunk_max_ms"] for f in d)
        return f"a {s['bundle']['bytes']:,}-byte signed bundle ({s['bundle']['chunks']} chunks) fetched and accepted in {s['idle']['ms']:.0f} ms idle, {fetched} during the flood (slowest chunk {chunks:.0f} ms; queue depth {s['queue_depth_at_last_fetch']:.0f}); the flood: {a['token']} tokens, {a['busy']} Busy, {a['expired']} expired"
    return ""
def pr(p):
    if p is None: return "-"
    if p.get("connect_error"): return "connect failed: " + p["connect_error"][:60]
    return f"{p['served_within_deadline']}/{p['escalations']}, p50 {p['p50_ms']:.0f} ms"
order = ['squat', 'claim', 'session-flood', 'unfinished-streams', 'idle-flood', 'huge-full', 'overload', 'bundle-flood']
for name, s in sorted(r.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99):
    a = s.get("after", {})
    rec = a.get("rss_recovered_after_s")
    print(f"| {name} | {got(name, s)} | {a.get('rss_baseline_mb',0):.0f} → {a.get('rss_peak_mb',0):.0f} → {a.get('rss_after_mb',0):.0f} | {'%.1f s' % rec if rec is not None else 'no'} | {pr(a.get('probe_during'))} | {pr(a.get('probe_after'))} | {a.get('ready_after')} |")
PY
