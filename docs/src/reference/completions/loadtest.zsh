#compdef loadtest

autoload -U is-at-least

_loadtest() {
    typeset -A opt_args
    typeset -a _arguments_options
    local ret=1

    if is-at-least 5.2; then
        _arguments_options=(-s -S -C)
    else
        _arguments_options=(-s -C)
    fi

    local context curcontext="$curcontext" state line
    _arguments "${_arguments_options[@]}" : \
'--log=[Log filter]:LOG:_default' \
'-h[Print help]' \
'--help[Print help]' \
'-V[Print version]' \
'--version[Print version]' \
":: :_loadtest_commands" \
"*::: :->loadtest" \
&& ret=0
    case $state in
    (loadtest)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:loadtest-command-$line[1]:"
        case $line[1] in
            (batching)
_arguments "${_arguments_options[@]}" : \
'--model=[LLM model id or directory]:MODEL:_default' \
'*--batches=[Batch sizes to measure (the first is the baseline)]:BATCHES:_default' \
'--context=[Context each session starts with]:CONTEXT:_default' \
'*--deltas=[New tokens each escalation carries (1 = every token escalated; ~14 = 7 % escalation)]:DELTAS:_default' \
'--steps=[Timed escalation rounds per configuration]:STEPS:_default' \
'--threads=[ONNX Runtime threads (0 = all cores)]:THREADS:_default' \
'--log=[Log filter]:LOG:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(gateway-latency)
_arguments "${_arguments_options[@]}" : \
'--devices=[Simulated devices (one QUIC connection each)]:DEVICES:_default' \
'--sessions=[Concurrent sessions per device]:SESSIONS:_default' \
'--escalations=[Escalations per session (sequential, delta-synced)]:ESCALATIONS:_default' \
'--cost-ms=[Fixed backend cost per batch, ms]:COST_MS:_default' \
'--max-batch=[Gateway batch cut\: most escalations per batch]:MAX_BATCH:_default' \
'--max-wait-ms=[Gateway batch cut\: longest wait, ms]:MAX_WAIT_MS:_default' \
'--max-batch-tokens=[Gateway cost cap\: most tokens of prefill one backend call may carry. The fixed-cost backend costs the same per call whatever it carries, so the gateway'\''s default cap (which bounds a real model'\''s call time) would only split each batch into more calls of the same fixed cost and measure that; by default the cap is off here, as before it existed]:MAX_BATCH_TOKENS:_default' \
'--fair-share=[Share the batcher'\''s queue between devices by the tokens each was served (the gateway'\''s \`--fair-share device\`, its default), or \`off\`\: oldest first, as before fair sharing existed (for same-run comparisons with older builds)]:FAIR_SHARE:((device\:"The device served the fewest LLM tokens first; a device over its share hears \`Busy\` first"
off\:"Oldest first, every device'\''s work weighed alike"))' \
'--delta=[Tokens appended between escalations]:DELTA:_default' \
'--trace-sample=[Trace this share of escalations (0..=1, e.g. 0.01 or 1)\: devices send a sampled trace context with it and the gateway exports spans to an OTLP receiver in this process. Unset\: tracing off]:TRACE_SAMPLE:_default' \
'--log=[Log filter]:LOG:_default' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(engines)
_arguments "${_arguments_options[@]}" : \
'*--engine=[Engine worker, KIND=URL (repeatable); none = the embedded ONNX LLM in this process]:ENGINES:_default' \
'--sessions=[Concurrent sessions (each has one escalation in flight at a time)]:SESSIONS:_default' \
'--escalations=[Escalations per session]:ESCALATIONS:_default' \
'--prompt-tokens=[Tokens of the first escalation (a \`Full\`)]:PROMPT_TOKENS:_default' \
'--delta=[Text tokens appended between escalations (after the answer token)]:DELTA:_default' \
'--routing=[Worker choice with several engines\: sticky or round-robin]:ROUTING:((sticky\:"Each session to its rendezvous worker, for the engine'\''s prefix cache (the default)"
round-robin\:"Each request to the next eligible worker in turn, ignoring the session (a baseline)"))' \
'--seed=[Picks the text offsets of the sessions]:SEED:_default' \
'--json=[Write the JSON report here instead of stdout]:JSON:_files' \
'--sessions-per-device=[Sessions per simulated device (one QUIC connection each)]:SESSIONS_PER_DEVICE:_default' \
'--deadline-ms=[Escalation deadline, ms (the gateway caps it at 30 000)]:DEADLINE_MS:_default' \
'--max-in-flight=[Most requests in flight per engine worker (the gateway'\''s \`--engine-max-in-flight\`)]:MAX_IN_FLIGHT:_default' \
'--max-attempts=[Most attempts per escalation (the gateway'\''s \`--engine-max-attempts\`); with more than one and several workers, an attempt gets only half the time left]:MAX_ATTEMPTS:_default' \
'--health-timeout-ms=[Timeout of the gateway'\''s health checks of its workers, ms (default\: the gateway'\''s)]:HEALTH_TIMEOUT_MS:_default' \
'--tokenizer=[The devices'\'' tokenizer\: a prepared model id, a directory or a tokenizer.json]:TOKENIZER:_default' \
'--model=[Embedded LLM\: model id or directory]:MODEL:_default' \
'--threads=[Embedded LLM\: ONNX Runtime threads (0 = all cores)]:THREADS:_default' \
'--max-batch=[Embedded LLM\: most escalations per batch]:MAX_BATCH:_default' \
'--label=[Free-form name copied into the report (e.g. "2 workers, -np 8")]:LABEL:_default' \
'--engine-admission=[Admission to engine workers, as the gateway'\''s \`--engine-admission\`\: \`cost\` refuses \`Busy\` when no worker'\''s queue lets an escalation be answered in time; \`off\` sends it while a worker has room (the behaviour before admission by cost, for same-run comparisons)]:ENGINE_ADMISSION:(cost off)' \
'--log=[Log filter]:LOG:_default' \
'--direct[No gateway\: send the same requests straight to the engine(s) (the baseline)]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(relay)
_arguments "${_arguments_options[@]}" : \
'--profile=[Network profile (\`--list\` shows them)]:PROFILE:_default' \
'--listen=[Where devices send (HOST\:PORT)]:LISTEN:_default' \
'--upstream=[The gateway'\''s QUIC address (HOST\:PORT)]:UPSTREAM:_default' \
'--profiles-file=[A TOML file of profiles read on top of the shipped ones (same form as relay/network-profiles.toml)]:PROFILES_FILE:_files' \
'--seed=[Seeds the random streams (the same seed and traffic give the same fates)]:SEED:_default' \
'--stats-every-s=[Print a line of statistics this often, seconds (0\: only at the end)]:STATS_EVERY_S:_default' \
'--duration-s=[Stop after this many seconds (default\: at Ctrl-C)]:DURATION_S:_default' \
'--max-clients=[Most clients (device addresses) at once]:MAX_CLIENTS:_default' \
'--idle-timeout-s=[Forget a client after this many seconds without traffic]:IDLE_TIMEOUT_S:_default' \
'--bench-clients=[\`--bench\`\: concurrent clients]:BENCH_CLIENTS:_default' \
'--bench-rounds=[\`--bench\`\: round trips per client per phase]:BENCH_ROUNDS:_default' \
'--bench-bytes=[\`--bench\`\: datagram payload, bytes]:BENCH_BYTES:_default' \
'--bench-interval-ms=[\`--bench\`\: each client starts a round trip this often, ms (0\: closed loop, as fast as answers come)]:BENCH_INTERVAL_MS:_default' \
'--bench-repeats=[\`--bench\`\: phases of each path, alternated]:BENCH_REPEATS:_default' \
'--json=[Write the JSON report (final statistics, or \`--bench\`'\''s) here instead of stdout]:JSON:_files' \
'--log=[Log filter]:LOG:_default' \
'--list[List the profiles and exit]' \
'--bench[Measure the relay'\''s own cost\: UDP round trips to an echo server in this process, straight and through the relay, alternated; prints a JSON report]' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(fleet)
_arguments "${_arguments_options[@]}" : \
'--devices=[Simulated devices (one QUIC connection each)]:DEVICES:_default' \
'--ramp-up-s=[Seconds over which devices connect (evenly spread)]:RAMP_UP_S:_default' \
'--duration-s=[Seconds of load after the ramp-up; then every device stops (the run ends by itself)]:DURATION_S:_default' \
'--sessions=[Most sessions per device]:SESSIONS:_default' \
'--think-time-s=[Mean think time between a device'\''s sessions, s (exponential); the first session starts at a random point of the first think period]:THINK_TIME_S:_default' \
'--mix=[Session kinds of the trace and their shares]:MIX:_default' \
'(--tau)--escalation-rate=[Share of tokens to escalate\: the tau is taken from the trace'\''s confidences to hit it]:ESCALATION_RATE:_default' \
'--tau=[Instead of --escalation-rate\: the confidence router'\''s threshold itself]:TAU:_default' \
'--seed=[Seeds device choices, think times and the relays'\'' impairments]:SEED:_default' \
'--profiles=[Devices per network profile\: NAME=SHARE,... (\`direct\`\: no relay)]:PROFILES:_default' \
'--profiles-file=[More network profiles (TOML, read on top of the shipped ones)]:PROFILES_FILE:_files' \
'--gateway=[An external gateway (host\:port) instead of starting one; \`--backend\` then says what stands behind it (fixed-cost\: cloud tokens are checked)]:EXTERNAL_GATEWAY:_default' \
'--ca-cert=[The external gateway'\''s certificate (PEM)]:CA_CERT:_files' \
'--gateway-metrics=[The external gateway'\''s HTTP side port (host\:port), to scrape /metrics]:GATEWAY_METRICS:_default' \
'--gateway-pid=[The external gateway'\''s process id on this machine, for its CPU and RSS]:GATEWAY_PID:_default' \
'--backend=[What answers escalations\: fixed-cost\[\:MS\] (MS per batch), embedded\[\:MODEL\] or engine=KIND=URL\[,KIND=URL...\]]:BACKEND:_default' \
'--trace=[The recorded SLM trace the devices replay; the fixed-cost backend announces its tokenizer (default\: the built-in trace of qwen2.5-coder-0.5b, \`loadtest/traces/\`)]:TRACE:_files' \
'--listen=[QUIC address]:LISTEN:_default' \
'--http-listen=[HTTP side port (/metrics)]:HTTP_LISTEN:_default' \
'--cert-dir=[Where to write the self-signed certificate devices pin (default\: a temporary directory)]:CERT_DIR:_files' \
'--max-batch=[Most escalations per backend call]:MAX_BATCH:_default' \
'--max-wait-ms=[Longest wait for a batch to fill, ms]:MAX_WAIT_MS:_default' \
'--queue-capacity=[Most escalations queued or running; beyond it devices get \`Busy\`]:QUEUE_CAPACITY:_default' \
'--max-connections=[Most connected devices]:MAX_CONNECTIONS:_default' \
'--llm-threads=[Embedded LLM\: ONNX Runtime threads (0 = all cores)]:LLM_THREADS:_default' \
'--client-ca=[Verify devices (mutual TLS) against this fleet CA certificate, as a production gateway does with --client-ca (\`loadtest fleet --fleet-ca-dir\` sets it to the CA'\''s ca-cert.pem)]:CLIENT_CA:_files' \
'--draft-verify=[How much of each draft the LLM checks (the gateway'\''s \`--draft-verify\`)]:DRAFT_VERIFY:((whole\:"Every draft token the device sent (up to the protocol'\''s bound)"
by-load\:"A prefix that shortens as the queue ages past what one batch takes (\[\`verify_len\`\])"))' \
'--deadline-min-ms=[Shortest wait for a cloud token, ms]:DEADLINE_MIN_MS:_default' \
'--deadline-max-ms=[Longest wait for a cloud token, ms (the edge'\''s default)]:DEADLINE_MAX_MS:_default' \
'--deadline-per-token-ms=[Expected LLM time per context token sent, ms, until measured]:DEADLINE_PER_TOKEN_MS:_default' \
'--draft=[Escalations carry drafts (\`adaptive\`\: the trace'\''s continuation, at the length the edge'\''s draft rule chooses) or none (\`off\`, one token per escalation)]:DRAFT:((off\:"One token per escalation, as before protocol v5"
adaptive\:"Drafts whose length follows acceptance and the answer time (\[\`DraftControl\`\])"))' \
'--ping-interval-s=[Seconds between a device'\''s pings (the transport baseline)]:PING_INTERVAL_S:_default' \
'--baseline-devices=[Local-only devices run beside the fleet (same sessions, no cloud)\: the tokens/s baseline. Default\: 2 % of --devices, at least 2]:BASELINE_DEVICES:_default' \
'--connect-timeout-s=[Seconds a device waits for its first connection]:CONNECT_TIMEOUT_S:_default' \
'--progress-s=[Seconds between progress lines on stderr (0\: none)]:PROGRESS_S:_default' \
'--json=[Write the JSON report here (default\: stdout)]:JSON:_files' \
'--html=[Write the HTML report here]:HTML:_files' \
'--label=[A name for the run, copied into the reports]:LABEL:_default' \
'--device-prefix=[Device ids are PREFIX-N\: fleets sharing gateways need distinct prefixes (a gateway keys sessions by device id, so two devices with one id would share sessions)]:DEVICE_PREFIX:_default' \
'(--client-cert-dir)--fleet-ca-dir=[The fleet CA'\''s directory (\`cloud-gateway ca init-ca\`)\: each device presents a certificate of its own, issued from it at start (mutual TLS, for a gateway with --client-ca). The fleet'\''s own gateway then verifies them against its ca-cert.pem]:FLEET_CA_DIR:_files' \
'--client-cert-dir=[Certificates issued beforehand\: DIR/<device id>/device-cert.pem and device-key.pem (\`cloud-gateway ca issue --out DIR/<device id>\`), one per device]:CLIENT_CERT_DIR:_files' \
'--log=[Log filter]:LOG:_default' \
'--no-presync[Do not send the prompt ahead of the first hard token]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(capacity)
_arguments "${_arguments_options[@]}" : \
'*--rows=[Rows to measure, in order]:ROWS:((one-token\:"One token per escalation"
draft\:"Drafts at the edge'\''s adaptive length, checked whole"
draft-by-load\:"Drafts at the edge'\''s adaptive length; the gateway checks less of them under load"))' \
'--served-at-least=[Least share of escalations the LLM must answer in time]:SERVED_AT_LEAST:_default' \
'--itl-p99-ms=[Largest inter-token p99 of the devices, ms]:ITL_P99_MS:_default' \
'--min-escalations=[Fewest escalations a probe must see to be judged]:MIN_ESCALATIONS:_default' \
'--max-devices=[Largest fleet tried (the answer is a lower bound if it still holds there)]:MAX_DEVICES:_default' \
'--precision=[Stop when the bracket is within this share of the size that held]:PRECISION:_default' \
'--out=[Directory for the capacity report (capacity.json, capacity.html, capacity.md) and every probe'\''s fleet report]:OUT:_files' \
'--devices=[Simulated devices (one QUIC connection each)]:DEVICES:_default' \
'--ramp-up-s=[Seconds over which devices connect (evenly spread)]:RAMP_UP_S:_default' \
'--duration-s=[Seconds of load after the ramp-up; then every device stops (the run ends by itself)]:DURATION_S:_default' \
'--sessions=[Most sessions per device]:SESSIONS:_default' \
'--think-time-s=[Mean think time between a device'\''s sessions, s (exponential); the first session starts at a random point of the first think period]:THINK_TIME_S:_default' \
'--mix=[Session kinds of the trace and their shares]:MIX:_default' \
'(--tau)--escalation-rate=[Share of tokens to escalate\: the tau is taken from the trace'\''s confidences to hit it]:ESCALATION_RATE:_default' \
'--tau=[Instead of --escalation-rate\: the confidence router'\''s threshold itself]:TAU:_default' \
'--seed=[Seeds device choices, think times and the relays'\'' impairments]:SEED:_default' \
'--profiles=[Devices per network profile\: NAME=SHARE,... (\`direct\`\: no relay)]:PROFILES:_default' \
'--profiles-file=[More network profiles (TOML, read on top of the shipped ones)]:PROFILES_FILE:_files' \
'--gateway=[An external gateway (host\:port) instead of starting one; \`--backend\` then says what stands behind it (fixed-cost\: cloud tokens are checked)]:EXTERNAL_GATEWAY:_default' \
'--ca-cert=[The external gateway'\''s certificate (PEM)]:CA_CERT:_files' \
'--gateway-metrics=[The external gateway'\''s HTTP side port (host\:port), to scrape /metrics]:GATEWAY_METRICS:_default' \
'--gateway-pid=[The external gateway'\''s process id on this machine, for its CPU and RSS]:GATEWAY_PID:_default' \
'--backend=[What answers escalations\: fixed-cost\[\:MS\] (MS per batch), embedded\[\:MODEL\] or engine=KIND=URL\[,KIND=URL...\]]:BACKEND:_default' \
'--trace=[The recorded SLM trace the devices replay; the fixed-cost backend announces its tokenizer (default\: the built-in trace of qwen2.5-coder-0.5b, \`loadtest/traces/\`)]:TRACE:_files' \
'--listen=[QUIC address]:LISTEN:_default' \
'--http-listen=[HTTP side port (/metrics)]:HTTP_LISTEN:_default' \
'--cert-dir=[Where to write the self-signed certificate devices pin (default\: a temporary directory)]:CERT_DIR:_files' \
'--max-batch=[Most escalations per backend call]:MAX_BATCH:_default' \
'--max-wait-ms=[Longest wait for a batch to fill, ms]:MAX_WAIT_MS:_default' \
'--queue-capacity=[Most escalations queued or running; beyond it devices get \`Busy\`]:QUEUE_CAPACITY:_default' \
'--max-connections=[Most connected devices]:MAX_CONNECTIONS:_default' \
'--llm-threads=[Embedded LLM\: ONNX Runtime threads (0 = all cores)]:LLM_THREADS:_default' \
'--client-ca=[Verify devices (mutual TLS) against this fleet CA certificate, as a production gateway does with --client-ca (\`loadtest fleet --fleet-ca-dir\` sets it to the CA'\''s ca-cert.pem)]:CLIENT_CA:_files' \
'--draft-verify=[How much of each draft the LLM checks (the gateway'\''s \`--draft-verify\`)]:DRAFT_VERIFY:((whole\:"Every draft token the device sent (up to the protocol'\''s bound)"
by-load\:"A prefix that shortens as the queue ages past what one batch takes (\[\`verify_len\`\])"))' \
'--deadline-min-ms=[Shortest wait for a cloud token, ms]:DEADLINE_MIN_MS:_default' \
'--deadline-max-ms=[Longest wait for a cloud token, ms (the edge'\''s default)]:DEADLINE_MAX_MS:_default' \
'--deadline-per-token-ms=[Expected LLM time per context token sent, ms, until measured]:DEADLINE_PER_TOKEN_MS:_default' \
'--draft=[Escalations carry drafts (\`adaptive\`\: the trace'\''s continuation, at the length the edge'\''s draft rule chooses) or none (\`off\`, one token per escalation)]:DRAFT:((off\:"One token per escalation, as before protocol v5"
adaptive\:"Drafts whose length follows acceptance and the answer time (\[\`DraftControl\`\])"))' \
'--ping-interval-s=[Seconds between a device'\''s pings (the transport baseline)]:PING_INTERVAL_S:_default' \
'--baseline-devices=[Local-only devices run beside the fleet (same sessions, no cloud)\: the tokens/s baseline. Default\: 2 % of --devices, at least 2]:BASELINE_DEVICES:_default' \
'--connect-timeout-s=[Seconds a device waits for its first connection]:CONNECT_TIMEOUT_S:_default' \
'--progress-s=[Seconds between progress lines on stderr (0\: none)]:PROGRESS_S:_default' \
'--json=[Write the JSON report here (default\: stdout)]:JSON:_files' \
'--html=[Write the HTML report here]:HTML:_files' \
'--label=[A name for the run, copied into the reports]:LABEL:_default' \
'--device-prefix=[Device ids are PREFIX-N\: fleets sharing gateways need distinct prefixes (a gateway keys sessions by device id, so two devices with one id would share sessions)]:DEVICE_PREFIX:_default' \
'(--client-cert-dir)--fleet-ca-dir=[The fleet CA'\''s directory (\`cloud-gateway ca init-ca\`)\: each device presents a certificate of its own, issued from it at start (mutual TLS, for a gateway with --client-ca). The fleet'\''s own gateway then verifies them against its ca-cert.pem]:FLEET_CA_DIR:_files' \
'--client-cert-dir=[Certificates issued beforehand\: DIR/<device id>/device-cert.pem and device-key.pem (\`cloud-gateway ca issue --out DIR/<device id>\`), one per device]:CLIENT_CERT_DIR:_files' \
'--log=[Log filter]:LOG:_default' \
'--no-presync[Do not send the prompt ahead of the first hard token]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(handshake)
_arguments "${_arguments_options[@]}" : \
'--connections=[Handshakes per mode (split over the rounds)]:CONNECTIONS:_default' \
'--concurrency=[Devices handshaking at once (each its own UDP socket and, with mTLS, its own certificate)]:CONCURRENCY:_default' \
'--rounds=[Alternating rounds of each mode]:ROUNDS:_default' \
'--log=[Log filter]:LOG:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(gateway)
_arguments "${_arguments_options[@]}" : \
'--backend=[What answers escalations\: fixed-cost\[\:MS\] (MS per batch), embedded\[\:MODEL\] or engine=KIND=URL\[,KIND=URL...\]]:BACKEND:_default' \
'--trace=[The recorded SLM trace the devices replay; the fixed-cost backend announces its tokenizer (default\: the built-in trace of qwen2.5-coder-0.5b, \`loadtest/traces/\`)]:TRACE:_files' \
'--listen=[QUIC address]:LISTEN:_default' \
'--http-listen=[HTTP side port (/metrics)]:HTTP_LISTEN:_default' \
'--cert-dir=[Where to write the self-signed certificate devices pin (default\: a temporary directory)]:CERT_DIR:_files' \
'--max-batch=[Most escalations per backend call]:MAX_BATCH:_default' \
'--max-wait-ms=[Longest wait for a batch to fill, ms]:MAX_WAIT_MS:_default' \
'--queue-capacity=[Most escalations queued or running; beyond it devices get \`Busy\`]:QUEUE_CAPACITY:_default' \
'--max-connections=[Most connected devices]:MAX_CONNECTIONS:_default' \
'--llm-threads=[Embedded LLM\: ONNX Runtime threads (0 = all cores)]:LLM_THREADS:_default' \
'--client-ca=[Verify devices (mutual TLS) against this fleet CA certificate, as a production gateway does with --client-ca (\`loadtest fleet --fleet-ca-dir\` sets it to the CA'\''s ca-cert.pem)]:CLIENT_CA:_files' \
'--draft-verify=[How much of each draft the LLM checks (the gateway'\''s \`--draft-verify\`)]:DRAFT_VERIFY:((whole\:"Every draft token the device sent (up to the protocol'\''s bound)"
by-load\:"A prefix that shortens as the queue ages past what one batch takes (\[\`verify_len\`\])"))' \
'--log=[Log filter]:LOG:_default' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(abuse)
_arguments "${_arguments_options[@]}" : \
'--gateway-bin=[The \`cloud-gateway\` binary \[default\: the one next to this program\]]:GATEWAY_BIN:_files' \
'--model=[Model the gateway serves (its answers do not matter; its tokenizer must be the devices'\'')]:MODEL:_default' \
'--backend-delay-ms=[Simulated backend time per batch, ms (the 1.5B'\''s decode step here\: ~60 ms)]:BACKEND_DELAY_MS:_default' \
'--backend-token-delay-us=[Simulated backend time per token of prefill, µs (the 1.5B'\''s here\: ~18 ms)]:BACKEND_TOKEN_DELAY_US:_default' \
'--scenario-secs=[How long the timed scenarios (overload, huge Full) run, seconds]:SCENARIO_SECS:_default' \
'--probe-deadline-ms=[The well-behaved device'\''s deadline per escalation, ms]:PROBE_DEADLINE_MS:_default' \
'*--scenarios=[Only these scenarios (squat, claim\: ids claimed without their per-device tokens, session-flood, unfinished-streams, idle-flood, huge-full, overload, bundle-flood\: a signed bundle downloaded during the overload'\''s flood, fair-flood\: one device floods, 20 behave; engine-overload\: 3x what the --engine answers); default all but engine-overload (which needs an engine)]:SCENARIOS:_default' \
'--fair-behaved-load=[fair-flood on the engine path\: the well-behaved devices together offer this fraction of the engine'\''s capacity, measured first in their shape (their pause between escalations follows from it, at least 0.5 s); without --engine they pause 0.5 s]:FAIR_BEHAVED_LOAD:_default' \
'*--engine=[Engine worker the gateway relays to instead of serving the model itself, KIND=URL (repeatable), e.g. llamacpp=http\://127.0.0.1\:8090; --model is then the devices'\'' tokenizer it is checked against]:ENGINES:_default' \
'*--gateway-arg=[Extra flag for the gateway (repeatable), e.g. --gateway-arg=--max-sessions=100000]:GATEWAY_ARGS:_default' \
'--gateway-log=[The gateway'\''s log filter (tracing'\''s EnvFilter syntax), e.g. \`warn,cloud_gateway\:\:engine\:\:pool=debug\` for every engine admission decision]:GATEWAY_LOG:_default' \
'--gateway-log-file=[Append every line the gateway logs to this file (otherwise only its errors are shown)]:GATEWAY_LOG_FILE:_files' \
'--out=[Write the JSON report here too]:OUT:_files' \
'--log=[Log filter]:LOG:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_loadtest__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:loadtest-help-command-$line[1]:"
        case $line[1] in
            (batching)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(gateway-latency)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(engines)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(relay)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(fleet)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(capacity)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(handshake)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(gateway)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(abuse)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
        esac
    ;;
esac
}

(( $+functions[_loadtest_commands] )) ||
_loadtest_commands() {
    local commands; commands=(
'batching:Tokens/s of the embedded backend at several batch sizes (batch 1 is the baseline)' \
'gateway-latency:Latency the gateway adds per escalation\: simulated devices over real QUIC on loopback against a gateway whose backend has a fixed, known cost' \
'engines:The gateway in front of external engines (or the embedded LLM), or \`--direct\` the same requests straight to the engines\: throughput, latency, prefix-cache share' \
'relay:A UDP impairment relay between devices and a gateway\: delay, jitter, loss, bandwidth cap, duplication and blackouts of a named network profile (\`--list\`, \`--bench\`)' \
'fleet:Thousands of simulated devices (the real edge stack, a recorded SLM trace) on impaired links against one gateway; every device checks its token stream. JSON + HTML report' \
'capacity:Devices per LLM server at a service level\: fleet runs (recorded SLM traces, real drafts) searched over the fleet'\''s size, per way of escalating (one token, drafts, drafts checked by load). JSON + markdown + HTML report' \
'handshake:Handshake cost of device identity\: connections/s with mutual TLS against the shared-token handshake, same run' \
'gateway:A gateway for fleet tests (fixed-cost backend, embedded LLM or engines)\: prints its addresses as one JSON line and serves until its standard input closes' \
'abuse:Hostile probe scenarios against a real cloud-gateway process (id squatting, invented-id session flood, unfinished streams, idle-connection flood, a huge Full from a device that leaves, sustained overload)\: after each, a well-behaved device'\''s service, the gateway'\''s RSS against its baseline, Busy against expired' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'loadtest commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__abuse_commands] )) ||
_loadtest__subcmd__abuse_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest abuse commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__batching_commands] )) ||
_loadtest__subcmd__batching_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest batching commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__capacity_commands] )) ||
_loadtest__subcmd__capacity_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest capacity commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__engines_commands] )) ||
_loadtest__subcmd__engines_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest engines commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__fleet_commands] )) ||
_loadtest__subcmd__fleet_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest fleet commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__gateway_commands] )) ||
_loadtest__subcmd__gateway_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest gateway commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__gateway-latency_commands] )) ||
_loadtest__subcmd__gateway-latency_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest gateway-latency commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__handshake_commands] )) ||
_loadtest__subcmd__handshake_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest handshake commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help_commands] )) ||
_loadtest__subcmd__help_commands() {
    local commands; commands=(
'batching:Tokens/s of the embedded backend at several batch sizes (batch 1 is the baseline)' \
'gateway-latency:Latency the gateway adds per escalation\: simulated devices over real QUIC on loopback against a gateway whose backend has a fixed, known cost' \
'engines:The gateway in front of external engines (or the embedded LLM), or \`--direct\` the same requests straight to the engines\: throughput, latency, prefix-cache share' \
'relay:A UDP impairment relay between devices and a gateway\: delay, jitter, loss, bandwidth cap, duplication and blackouts of a named network profile (\`--list\`, \`--bench\`)' \
'fleet:Thousands of simulated devices (the real edge stack, a recorded SLM trace) on impaired links against one gateway; every device checks its token stream. JSON + HTML report' \
'capacity:Devices per LLM server at a service level\: fleet runs (recorded SLM traces, real drafts) searched over the fleet'\''s size, per way of escalating (one token, drafts, drafts checked by load). JSON + markdown + HTML report' \
'handshake:Handshake cost of device identity\: connections/s with mutual TLS against the shared-token handshake, same run' \
'gateway:A gateway for fleet tests (fixed-cost backend, embedded LLM or engines)\: prints its addresses as one JSON line and serves until its standard input closes' \
'abuse:Hostile probe scenarios against a real cloud-gateway process (id squatting, invented-id session flood, unfinished streams, idle-connection flood, a huge Full from a device that leaves, sustained overload)\: after each, a well-behaved device'\''s service, the gateway'\''s RSS against its baseline, Busy against expired' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'loadtest help commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help__subcmd__abuse_commands] )) ||
_loadtest__subcmd__help__subcmd__abuse_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest help abuse commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help__subcmd__batching_commands] )) ||
_loadtest__subcmd__help__subcmd__batching_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest help batching commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help__subcmd__capacity_commands] )) ||
_loadtest__subcmd__help__subcmd__capacity_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest help capacity commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help__subcmd__engines_commands] )) ||
_loadtest__subcmd__help__subcmd__engines_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest help engines commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help__subcmd__fleet_commands] )) ||
_loadtest__subcmd__help__subcmd__fleet_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest help fleet commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help__subcmd__gateway_commands] )) ||
_loadtest__subcmd__help__subcmd__gateway_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest help gateway commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help__subcmd__gateway-latency_commands] )) ||
_loadtest__subcmd__help__subcmd__gateway-latency_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest help gateway-latency commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help__subcmd__handshake_commands] )) ||
_loadtest__subcmd__help__subcmd__handshake_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest help handshake commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help__subcmd__help_commands] )) ||
_loadtest__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest help help commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__help__subcmd__relay_commands] )) ||
_loadtest__subcmd__help__subcmd__relay_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest help relay commands' commands "$@"
}
(( $+functions[_loadtest__subcmd__relay_commands] )) ||
_loadtest__subcmd__relay_commands() {
    local commands; commands=()
    _describe -t commands 'loadtest relay commands' commands "$@"
}

if [ "$funcstack[1]" = "_loadtest" ]; then
    _loadtest "$@"
else
    compdef _loadtest loadtest
fi
