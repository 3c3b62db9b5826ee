# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_loadtest_global_optspecs
    string join \n log= h/help V/version
end

function __fish_loadtest_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_loadtest_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_loadtest_using_subcommand
    set -l cmd (__fish_loadtest_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c loadtest -n "__fish_loadtest_needs_command" -l log -d 'Log filter' -r
complete -c loadtest -n "__fish_loadtest_needs_command" -s h -l help -d 'Print help'
complete -c loadtest -n "__fish_loadtest_needs_command" -s V -l version -d 'Print version'
complete -c loadtest -n "__fish_loadtest_needs_command" -f -a "batching" -d 'Tokens/s of the embedded backend at several batch sizes (batch 1 is the baseline)'
complete -c loadtest -n "__fish_loadtest_needs_command" -f -a "gateway-latency" -d 'Latency the gateway adds per escalation: simulated devices over real QUIC on loopback against a gateway whose backend has a fixed, known cost'
complete -c loadtest -n "__fish_loadtest_needs_command" -f -a "engines" -d 'The gateway in front of external engines (or the embedded LLM), or `--direct` the same requests straight to the engines: throughput, latency, prefix-cache share'
complete -c loadtest -n "__fish_loadtest_needs_command" -f -a "relay" -d 'A UDP impairment relay between devices and a gateway: delay, jitter, loss, bandwidth cap, duplication and blackouts of a named network profile (`--list`, `--bench`)'
complete -c loadtest -n "__fish_loadtest_needs_command" -f -a "fleet" -d 'Thousands of simulated devices (the real edge stack, a recorded SLM trace) on impaired links against one gateway; every device checks its token stream. JSON + HTML report'
complete -c loadtest -n "__fish_loadtest_needs_command" -f -a "capacity" -d 'Devices per LLM server at a service level: fleet runs (recorded SLM traces, real drafts) searched over the fleet\'s size, per way of escalating (one token, drafts, drafts checked by load). JSON + markdown + HTML report'
complete -c loadtest -n "__fish_loadtest_needs_command" -f -a "handshake" -d 'Handshake cost of device identity: connections/s with mutual TLS against the shared-token handshake, same run'
complete -c loadtest -n "__fish_loadtest_needs_command" -f -a "gateway" -d 'A gateway for fleet tests (fixed-cost backend, embedded LLM or engines): prints its addresses as one JSON line and serves until its standard input closes'
complete -c loadtest -n "__fish_loadtest_needs_command" -f -a "abuse" -d 'Hostile probe scenarios against a real cloud-gateway process (id squatting, invented-id session flood, unfinished streams, idle-connection flood, a huge Full from a device that leaves, sustained overload): after each, a well-behaved device\'s service, the gateway\'s RSS against its baseline, Busy against expired'
complete -c loadtest -n "__fish_loadtest_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c loadtest -n "__fish_loadtest_using_subcommand batching" -l model -d 'LLM model id or directory' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand batching" -l batches -d 'Batch sizes to measure (the first is the baseline)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand batching" -l context -d 'Context each session starts with' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand batching" -l deltas -d 'New tokens each escalation carries (1 = every token escalated; ~14 = 7 % escalation)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand batching" -l steps -d 'Timed escalation rounds per configuration' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand batching" -l threads -d 'ONNX Runtime threads (0 = all cores)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand batching" -l log -d 'Log filter' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand batching" -s h -l help -d 'Print help'
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l devices -d 'Simulated devices (one QUIC connection each)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l sessions -d 'Concurrent sessions per device' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l escalations -d 'Escalations per session (sequential, delta-synced)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l cost-ms -d 'Fixed backend cost per batch, ms' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l max-batch -d 'Gateway batch cut: most escalations per batch' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l max-wait-ms -d 'Gateway batch cut: longest wait, ms' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l max-batch-tokens -d 'Gateway cost cap: most tokens of prefill one backend call may carry. The fixed-cost backend costs the same per call whatever it carries, so the gateway\'s default cap (which bounds a real model\'s call time) would only split each batch into more calls of the same fixed cost and measure that; by default the cap is off here, as before it existed' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l fair-share -d 'Share the batcher\'s queue between devices by the tokens each was served (the gateway\'s `--fair-share device`, its default), or `off`: oldest first, as before fair sharing existed (for same-run comparisons with older builds)' -r -f -a "device\t'The device served the fewest LLM tokens first; a device over its share hears `Busy` first'
off\t'Oldest first, every device\'s work weighed alike'"
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l delta -d 'Tokens appended between escalations' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l trace-sample -d 'Trace this share of escalations (0..=1, e.g. 0.01 or 1): devices send a sampled trace context with it and the gateway exports spans to an OTLP receiver in this process. Unset: tracing off' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -l log -d 'Log filter' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway-latency" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l engine -d 'Engine worker, KIND=URL (repeatable); none = the embedded ONNX LLM in this process' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l sessions -d 'Concurrent sessions (each has one escalation in flight at a time)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l escalations -d 'Escalations per session' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l prompt-tokens -d 'Tokens of the first escalation (a `Full`)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l delta -d 'Text tokens appended between escalations (after the answer token)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l routing -d 'Worker choice with several engines: sticky or round-robin' -r -f -a "sticky\t'Each session to its rendezvous worker, for the engine\'s prefix cache (the default)'
round-robin\t'Each request to the next eligible worker in turn, ignoring the session (a baseline)'"
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l seed -d 'Picks the text offsets of the sessions' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l json -d 'Write the JSON report here instead of stdout' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l sessions-per-device -d 'Sessions per simulated device (one QUIC connection each)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l deadline-ms -d 'Escalation deadline, ms (the gateway caps it at 30 000)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l max-in-flight -d 'Most requests in flight per engine worker (the gateway\'s `--engine-max-in-flight`)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l max-attempts -d 'Most attempts per escalation (the gateway\'s `--engine-max-attempts`); with more than one and several workers, an attempt gets only half the time left' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l health-timeout-ms -d 'Timeout of the gateway\'s health checks of its workers, ms (default: the gateway\'s)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l tokenizer -d 'The devices\' tokenizer: a prepared model id, a directory or a tokenizer.json' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l model -d 'Embedded LLM: model id or directory' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l threads -d 'Embedded LLM: ONNX Runtime threads (0 = all cores)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l max-batch -d 'Embedded LLM: most escalations per batch' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l label -d 'Free-form name copied into the report (e.g. "2 workers, -np 8")' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l engine-admission -d 'Admission to engine workers, as the gateway\'s `--engine-admission`: `cost` refuses `Busy` when no worker\'s queue lets an escalation be answered in time; `off` sends it while a worker has room (the behaviour before admission by cost, for same-run comparisons)' -r -f -a "cost\t''
off\t''"
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l log -d 'Log filter' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -l direct -d 'No gateway: send the same requests straight to the engine(s) (the baseline)'
complete -c loadtest -n "__fish_loadtest_using_subcommand engines" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l profile -d 'Network profile (`--list` shows them)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l listen -d 'Where devices send (HOST:PORT)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l upstream -d 'The gateway\'s QUIC address (HOST:PORT)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l profiles-file -d 'A TOML file of profiles read on top of the shipped ones (same form as relay/network-profiles.toml)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l seed -d 'Seeds the random streams (the same seed and traffic give the same fates)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l stats-every-s -d 'Print a line of statistics this often, seconds (0: only at the end)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l duration-s -d 'Stop after this many seconds (default: at Ctrl-C)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l max-clients -d 'Most clients (device addresses) at once' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l idle-timeout-s -d 'Forget a client after this many seconds without traffic' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l bench-clients -d '`--bench`: concurrent clients' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l bench-rounds -d '`--bench`: round trips per client per phase' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l bench-bytes -d '`--bench`: datagram payload, bytes' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l bench-interval-ms -d '`--bench`: each client starts a round trip this often, ms (0: closed loop, as fast as answers come)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l bench-repeats -d '`--bench`: phases of each path, alternated' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l json -d 'Write the JSON report (final statistics, or `--bench`\'s) here instead of stdout' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l log -d 'Log filter' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l list -d 'List the profiles and exit'
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -l bench -d 'Measure the relay\'s own cost: UDP round trips to an echo server in this process, straight and through the relay, alternated; prints a JSON report'
complete -c loadtest -n "__fish_loadtest_using_subcommand relay" -s h -l help -d 'Print help'
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l devices -d 'Simulated devices (one QUIC connection each)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l ramp-up-s -d 'Seconds over which devices connect (evenly spread)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l duration-s -d 'Seconds of load after the ramp-up; then every device stops (the run ends by itself)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l sessions -d 'Most sessions per device' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l think-time-s -d 'Mean think time between a device\'s sessions, s (exponential); the first session starts at a random point of the first think period' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l mix -d 'Session kinds of the trace and their shares' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l escalation-rate -d 'Share of tokens to escalate: the tau is taken from the trace\'s confidences to hit it' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l tau -d 'Instead of --escalation-rate: the confidence router\'s threshold itself' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l seed -d 'Seeds device choices, think times and the relays\' impairments' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l profiles -d 'Devices per network profile: NAME=SHARE,... (`direct`: no relay)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l profiles-file -d 'More network profiles (TOML, read on top of the shipped ones)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l gateway -d 'An external gateway (host:port) instead of starting one; `--backend` then says what stands behind it (fixed-cost: cloud tokens are checked)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l ca-cert -d 'The external gateway\'s certificate (PEM)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l gateway-metrics -d 'The external gateway\'s HTTP side port (host:port), to scrape /metrics' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l gateway-pid -d 'The external gateway\'s process id on this machine, for its CPU and RSS' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l backend -d 'What answers escalations: fixed-cost[:MS] (MS per batch), embedded[:MODEL] or engine=KIND=URL[,KIND=URL...]' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l trace -d 'The recorded SLM trace the devices replay; the fixed-cost backend announces its tokenizer (default: the built-in trace of qwen2.5-coder-0.5b, `loadtest/traces/`)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l listen -d 'QUIC address' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l http-listen -d 'HTTP side port (/metrics)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l cert-dir -d 'Where to write the self-signed certificate devices pin (default: a temporary directory)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l max-batch -d 'Most escalations per backend call' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l max-wait-ms -d 'Longest wait for a batch to fill, ms' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l queue-capacity -d 'Most escalations queued or running; beyond it devices get `Busy`' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l max-connections -d 'Most connected devices' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l llm-threads -d 'Embedded LLM: ONNX Runtime threads (0 = all cores)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l client-ca -d 'Verify devices (mutual TLS) against this fleet CA certificate, as a production gateway does with --client-ca (`loadtest fleet --fleet-ca-dir` sets it to the CA\'s ca-cert.pem)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l draft-verify -d 'How much of each draft the LLM checks (the gateway\'s `--draft-verify`)' -r -f -a "whole\t'Every draft token the device sent (up to the protocol\'s bound)'
by-load\t'A prefix that shortens as the queue ages past what one batch takes ([`verify_len`])'"
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l deadline-min-ms -d 'Shortest wait for a cloud token, ms' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l deadline-max-ms -d 'Longest wait for a cloud token, ms (the edge\'s default)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l deadline-per-token-ms -d 'Expected LLM time per context token sent, ms, until measured' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l draft -d 'Escalations carry drafts (`adaptive`: the trace\'s continuation, at the length the edge\'s draft rule chooses) or none (`off`, one token per escalation)' -r -f -a "off\t'One token per escalation, as before protocol v5'
adaptive\t'Drafts whose length follows acceptance and the answer time ([`DraftControl`])'"
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l ping-interval-s -d 'Seconds between a device\'s pings (the transport baseline)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l baseline-devices -d 'Local-only devices run beside the fleet (same sessions, no cloud): the tokens/s baseline. Default: 2 % of --devices, at least 2' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l connect-timeout-s -d 'Seconds a device waits for its first connection' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l progress-s -d 'Seconds between progress lines on stderr (0: none)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l json -d 'Write the JSON report here (default: stdout)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l html -d 'Write the HTML report here' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l label -d 'A name for the run, copied into the reports' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l device-prefix -d 'Device ids are PREFIX-N: fleets sharing gateways need distinct prefixes (a gateway keys sessions by device id, so two devices with one id would share sessions)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l fleet-ca-dir -d 'The fleet CA\'s directory (`cloud-gateway ca init-ca`): each device presents a certificate of its own, issued from it at start (mutual TLS, for a gateway with --client-ca). The fleet\'s own gateway then verifies them against its ca-cert.pem' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l client-cert-dir -d 'Certificates issued beforehand: DIR/<device id>/device-cert.pem and device-key.pem (`cloud-gateway ca issue --out DIR/<device id>`), one per device' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l log -d 'Log filter' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -l no-presync -d 'Do not send the prompt ahead of the first hard token'
complete -c loadtest -n "__fish_loadtest_using_subcommand fleet" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l rows -d 'Rows to measure, in order' -r -f -a "one-token\t'One token per escalation'
draft\t'Drafts at the edge\'s adaptive length, checked whole'
draft-by-load\t'Drafts at the edge\'s adaptive length; the gateway checks less of them under load'"
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l served-at-least -d 'Least share of escalations the LLM must answer in time' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l itl-p99-ms -d 'Largest inter-token p99 of the devices, ms' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l min-escalations -d 'Fewest escalations a probe must see to be judged' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l max-devices -d 'Largest fleet tried (the answer is a lower bound if it still holds there)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l precision -d 'Stop when the bracket is within this share of the size that held' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l out -d 'Directory for the capacity report (capacity.json, capacity.html, capacity.md) and every probe\'s fleet report' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l devices -d 'Simulated devices (one QUIC connection each)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l ramp-up-s -d 'Seconds over which devices connect (evenly spread)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l duration-s -d 'Seconds of load after the ramp-up; then every device stops (the run ends by itself)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l sessions -d 'Most sessions per device' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l think-time-s -d 'Mean think time between a device\'s sessions, s (exponential); the first session starts at a random point of the first think period' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l mix -d 'Session kinds of the trace and their shares' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l escalation-rate -d 'Share of tokens to escalate: the tau is taken from the trace\'s confidences to hit it' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l tau -d 'Instead of --escalation-rate: the confidence router\'s threshold itself' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l seed -d 'Seeds device choices, think times and the relays\' impairments' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l profiles -d 'Devices per network profile: NAME=SHARE,... (`direct`: no relay)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l profiles-file -d 'More network profiles (TOML, read on top of the shipped ones)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l gateway -d 'An external gateway (host:port) instead of starting one; `--backend` then says what stands behind it (fixed-cost: cloud tokens are checked)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l ca-cert -d 'The external gateway\'s certificate (PEM)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l gateway-metrics -d 'The external gateway\'s HTTP side port (host:port), to scrape /metrics' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l gateway-pid -d 'The external gateway\'s process id on this machine, for its CPU and RSS' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l backend -d 'What answers escalations: fixed-cost[:MS] (MS per batch), embedded[:MODEL] or engine=KIND=URL[,KIND=URL...]' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l trace -d 'The recorded SLM trace the devices replay; the fixed-cost backend announces its tokenizer (default: the built-in trace of qwen2.5-coder-0.5b, `loadtest/traces/`)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l listen -d 'QUIC address' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l http-listen -d 'HTTP side port (/metrics)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l cert-dir -d 'Where to write the self-signed certificate devices pin (default: a temporary directory)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l max-batch -d 'Most escalations per backend call' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l max-wait-ms -d 'Longest wait for a batch to fill, ms' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l queue-capacity -d 'Most escalations queued or running; beyond it devices get `Busy`' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l max-connections -d 'Most connected devices' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l llm-threads -d 'Embedded LLM: ONNX Runtime threads (0 = all cores)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l client-ca -d 'Verify devices (mutual TLS) against this fleet CA certificate, as a production gateway does with --client-ca (`loadtest fleet --fleet-ca-dir` sets it to the CA\'s ca-cert.pem)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l draft-verify -d 'How much of each draft the LLM checks (the gateway\'s `--draft-verify`)' -r -f -a "whole\t'Every draft token the device sent (up to the protocol\'s bound)'
by-load\t'A prefix that shortens as the queue ages past what one batch takes ([`verify_len`])'"
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l deadline-min-ms -d 'Shortest wait for a cloud token, ms' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l deadline-max-ms -d 'Longest wait for a cloud token, ms (the edge\'s default)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l deadline-per-token-ms -d 'Expected LLM time per context token sent, ms, until measured' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l draft -d 'Escalations carry drafts (`adaptive`: the trace\'s continuation, at the length the edge\'s draft rule chooses) or none (`off`, one token per escalation)' -r -f -a "off\t'One token per escalation, as before protocol v5'
adaptive\t'Drafts whose length follows acceptance and the answer time ([`DraftControl`])'"
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l ping-interval-s -d 'Seconds between a device\'s pings (the transport baseline)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l baseline-devices -d 'Local-only devices run beside the fleet (same sessions, no cloud): the tokens/s baseline. Default: 2 % of --devices, at least 2' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l connect-timeout-s -d 'Seconds a device waits for its first connection' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l progress-s -d 'Seconds between progress lines on stderr (0: none)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l json -d 'Write the JSON report here (default: stdout)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l html -d 'Write the HTML report here' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l label -d 'A name for the run, copied into the reports' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l device-prefix -d 'Device ids are PREFIX-N: fleets sharing gateways need distinct prefixes (a gateway keys sessions by device id, so two devices with one id would share sessions)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l fleet-ca-dir -d 'The fleet CA\'s directory (`cloud-gateway ca init-ca`): each device presents a certificate of its own, issued from it at start (mutual TLS, for a gateway with --client-ca). The fleet\'s own gateway then verifies them against its ca-cert.pem' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l client-cert-dir -d 'Certificates issued beforehand: DIR/<device id>/device-cert.pem and device-key.pem (`cloud-gateway ca issue --out DIR/<device id>`), one per device' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l log -d 'Log filter' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -l no-presync -d 'Do not send the prompt ahead of the first hard token'
complete -c loadtest -n "__fish_loadtest_using_subcommand capacity" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c loadtest -n "__fish_loadtest_using_subcommand handshake" -l connections -d 'Handshakes per mode (split over the rounds)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand handshake" -l concurrency -d 'Devices handshaking at once (each its own UDP socket and, with mTLS, its own certificate)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand handshake" -l rounds -d 'Alternating rounds of each mode' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand handshake" -l log -d 'Log filter' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand handshake" -s h -l help -d 'Print help'
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l backend -d 'What answers escalations: fixed-cost[:MS] (MS per batch), embedded[:MODEL] or engine=KIND=URL[,KIND=URL...]' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l trace -d 'The recorded SLM trace the devices replay; the fixed-cost backend announces its tokenizer (default: the built-in trace of qwen2.5-coder-0.5b, `loadtest/traces/`)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l listen -d 'QUIC address' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l http-listen -d 'HTTP side port (/metrics)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l cert-dir -d 'Where to write the self-signed certificate devices pin (default: a temporary directory)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l max-batch -d 'Most escalations per backend call' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l max-wait-ms -d 'Longest wait for a batch to fill, ms' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l queue-capacity -d 'Most escalations queued or running; beyond it devices get `Busy`' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l max-connections -d 'Most connected devices' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l llm-threads -d 'Embedded LLM: ONNX Runtime threads (0 = all cores)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l client-ca -d 'Verify devices (mutual TLS) against this fleet CA certificate, as a production gateway does with --client-ca (`loadtest fleet --fleet-ca-dir` sets it to the CA\'s ca-cert.pem)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l draft-verify -d 'How much of each draft the LLM checks (the gateway\'s `--draft-verify`)' -r -f -a "whole\t'Every draft token the device sent (up to the protocol\'s bound)'
by-load\t'A prefix that shortens as the queue ages past what one batch takes ([`verify_len`])'"
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -l log -d 'Log filter' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand gateway" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l gateway-bin -d 'The `cloud-gateway` binary [default: the one next to this program]' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l model -d 'Model the gateway serves (its answers do not matter; its tokenizer must be the devices\')' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l backend-delay-ms -d 'Simulated backend time per batch, ms (the 1.5B\'s decode step here: ~60 ms)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l backend-token-delay-us -d 'Simulated backend time per token of prefill, µs (the 1.5B\'s here: ~18 ms)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l scenario-secs -d 'How long the timed scenarios (overload, huge Full) run, seconds' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l probe-deadline-ms -d 'The well-behaved device\'s deadline per escalation, ms' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l scenarios -d 'Only these scenarios (squat, claim: ids claimed without their per-device tokens, session-flood, unfinished-streams, idle-flood, huge-full, overload, bundle-flood: a signed bundle downloaded during the overload\'s flood, fair-flood: one device floods, 20 behave; engine-overload: 3x what the --engine answers); default all but engine-overload (which needs an engine)' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l fair-behaved-load -d 'fair-flood on the engine path: the well-behaved devices together offer this fraction of the engine\'s capacity, measured first in their shape (their pause between escalations follows from it, at least 0.5 s); without --engine they pause 0.5 s' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l engine -d 'Engine worker the gateway relays to instead of serving the model itself, KIND=URL (repeatable), e.g. llamacpp=http://127.0.0.1:8090; --model is then the devices\' tokenizer it is checked against' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l gateway-arg -d 'Extra flag for the gateway (repeatable), e.g. --gateway-arg=--max-sessions=100000' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l gateway-log -d 'The gateway\'s log filter (tracing\'s EnvFilter syntax), e.g. `warn,cloud_gateway::engine::pool=debug` for every engine admission decision' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l gateway-log-file -d 'Append every line the gateway logs to this file (otherwise only its errors are shown)' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l out -d 'Write the JSON report here too' -r -F
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -l log -d 'Log filter' -r
complete -c loadtest -n "__fish_loadtest_using_subcommand abuse" -s h -l help -d 'Print help'
complete -c loadtest -n "__fish_loadtest_using_subcommand help; and not __fish_seen_subcommand_from batching gateway-latency engines relay fleet capacity handshake gateway abuse help" -f -a "batching" -d 'Tokens/s of the embedded backend at several batch sizes (batch 1 is the baseline)'
complete -c loadtest -n "__fish_loadtest_using_subcommand help; and not __fish_seen_subcommand_from batching gateway-latency engines relay fleet capacity handshake gateway abuse help" -f -a "gateway-latency" -d 'Latency the gateway adds per escalation: simulated devices over real QUIC on loopback against a gateway whose backend has a fixed, known cost'
complete -c loadtest -n "__fish_loadtest_using_subcommand help; and not __fish_seen_subcommand_from batching gateway-latency engines relay fleet capacity handshake gateway abuse help" -f -a "engines" -d 'The gateway in front of external engines (or the embedded LLM), or `--direct` the same requests straight to the engines: throughput, latency, prefix-cache share'
complete -c loadtest -n "__fish_loadtest_using_subcommand help; and not __fish_seen_subcommand_from batching gateway-latency engines relay fleet capacity handshake gateway abuse help" -f -a "relay" -d 'A UDP impairment relay between devices and a gateway: delay, jitter, loss, bandwidth cap, duplication and blackouts of a named network profile (`--list`, `--bench`)'
complete -c loadtest -n "__fish_loadtest_using_subcommand help; and not __fish_seen_subcommand_from batching gateway-latency engines relay fleet capacity handshake gateway abuse help" -f -a "fleet" -d 'Thousands of simulated devices (the real edge stack, a recorded SLM trace) on impaired links against one gateway; every device checks its token stream. JSON + HTML report'
complete -c loadtest -n "__fish_loadtest_using_subcommand help; and not __fish_seen_subcommand_from batching gateway-latency engines relay fleet capacity handshake gateway abuse help" -f -a "capacity" -d 'Devices per LLM server at a service level: fleet runs (recorded SLM traces, real drafts) searched over the fleet\'s size, per way of escalating (one token, drafts, drafts checked by load). JSON + markdown + HTML report'
complete -c loadtest -n "__fish_loadtest_using_subcommand help; and not __fish_seen_subcommand_from batching gateway-latency engines relay fleet capacity handshake gateway abuse help" -f -a "handshake" -d 'Handshake cost of device identity: connections/s with mutual TLS against the shared-token handshake, same run'
complete -c loadtest -n "__fish_loadtest_using_subcommand help; and not __fish_seen_subcommand_from batching gateway-latency engines relay fleet capacity handshake gateway abuse help" -f -a "gateway" -d 'A gateway for fleet tests (fixed-cost backend, embedded LLM or engines): prints its addresses as one JSON line and serves until its standard input closes'
complete -c loadtest -n "__fish_loadtest_using_subcommand help; and not __fish_seen_subcommand_from batching gateway-latency engines relay fleet capacity handshake gateway abuse help" -f -a "abuse" -d 'Hostile probe scenarios against a real cloud-gateway process (id squatting, invented-id session flood, unfinished streams, idle-connection flood, a huge Full from a device that leaves, sustained overload): after each, a well-behaved device\'s service, the gateway\'s RSS against its baseline, Busy against expired'
complete -c loadtest -n "__fish_loadtest_using_subcommand help; and not __fish_seen_subcommand_from batching gateway-latency engines relay fleet capacity handshake gateway abuse help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
