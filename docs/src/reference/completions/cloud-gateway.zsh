#compdef cloud-gateway

autoload -U is-at-least

_cloud-gateway() {
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
'--config=[TOML file of settings, one table per section below (\`\[transport\]\`, \`\[identity\]\`, \`\[sessions\]\`, \`\[embedded\]\`, \`\[batcher\]\`, \`\[overload\]\`, \`\[engines\]\`, \`\[drain\]\`, \`\[fleet\]\`, \`\[telemetry\]\`); keys are the flags'\'' long names (\`engine\` takes an array). Unknown sections and keys are refused by name. Flags and DUET_* variables override it]:CONFIG:_files' \
'--listen=[UDP address for QUIC]:LISTEN:_default' \
'--http-listen=[TCP address of the HTTP side port (/metrics, /healthz, /readyz); "off" disables it]:HTTP_LISTEN:_default' \
'--tls-cert=[TLS certificate chain (PEM). Without it a self-signed certificate is generated]:TLS_CERT:_files' \
'--tls-key=[TLS private key (PEM)]:TLS_KEY:_files' \
'--write-cert=[Where to write the self-signed certificate (PEM) for devices'\'' --ca-cert \[default\: \$DUET_HOME/gateway-cert.pem\]. Its key is kept beside it (gateway-key.pem) and both are reused on restart, so devices that pinned it reconnect]:WRITE_CERT:_files' \
'--max-frame-bytes=[Largest accepted frame, bytes]:MAX_FRAME_BYTES:_default' \
'--max-connections=[Connected devices at most; beyond it devices are refused as overloaded]:MAX_CONNECTIONS:_default' \
'--gateway-id=[Gateway name announced to devices]:GATEWAY_ID:_default' \
'--auth-token=[Shared secret devices must present; unset accepts any device. Without --client-ca or --device-token-secret this is a development mode\: any device knowing it may claim any device id]:AUTH_TOKEN:_default' \
'--client-ca=[The fleet CA'\''s certificate (PEM, \`cloud-gateway ca init-ca\`)\: devices must present a certificate it issued (mutual TLS), and their id is the certificate'\''s subject common name, never what they claim]:CLIENT_CA:_files' \
'(--client-ca)--device-token-secret=[File with the secret per-device tokens are issued from (\`cloud-gateway ca init-token-secret\`; \`ca issue-token\` issues one)\: a device'\''s --auth-token must be the token of its own id. For devices that cannot hold a certificate]:DEVICE_TOKEN_SECRET:_files' \
'--revoked-file=[Deny list\: device ids and serial\:HEX certificate serials, one per line (\`cloud-gateway ca revoke\` appends). Reloaded on change and on SIGHUP; revoked devices are refused and disconnected]:REVOKED_FILE:_files' \
'--revoked-poll-ms=[How often the deny list'\''s and the CRLs'\'' files are checked for changes, ms]:REVOKED_POLL_MS:_default' \
'*--client-crl=[Certificate revocation lists signed by the fleet CA (PEM or DER; \`cloud-gateway ca revoke --crl\` writes one), checked in the TLS handshake with --client-ca. Several\: repeat the flag or separate with commas. Reloaded on change and on SIGHUP]:CLIENT_CRLS:_files' \
'--device-rate-limit=[Escalations per second each device may sustain (0 = no limit); beyond it \`Busy\`]:DEVICE_RATE_LIMIT:_default' \
'--device-rate-burst=[Escalations a device may make at once above its rate]:DEVICE_RATE_BURST:_default' \
'--max-sessions-per-device=[Sessions one device may hold]:MAX_SESSIONS_PER_DEVICE:_default' \
'--session-idle-secs=[Idle seconds after which a session is dropped]:SESSION_IDLE_SECS:_default' \
'--model=[LLM for the embedded backend\: prepared model id or directory]:MODEL:_default' \
'--threads=[ONNX Runtime intra-op threads (0 = all cores)]:THREADS:_default' \
'--max-context=[Longest session context, tokens]:MAX_CONTEXT:_default' \
'--kv-cache-sessions=[Sessions whose LLM KV cache is kept (LRU)]:KV_CACHE_SESSIONS:_default' \
'--backend-delay-ms=[Extra service time added to every backend call, ms (simulates a slow or remote LLM)]:BACKEND_DELAY_MS:_default' \
'--backend-token-delay-us=[Extra service time per token of prefill, µs (simulates a large LLM'\''s prefill cost)]:BACKEND_TOKEN_DELAY_US:_default' \
'--backend-draft-token-delay-us=[Extra service time per draft token checked, µs (a draft runs in the same pass as the prefill; simulates a large LLM'\''s cost of checking it)]:BACKEND_DRAFT_TOKEN_DELAY_US:_default' \
'(--replay-answers)--record-answers=[Write every greedy answer of the embedded LLM (and each draft position it accepted) to this file, for --replay-answers; an existing recording of the same model is extended]:RECORD_ANSWERS:_files' \
'--replay-answers=[Answer from a recording (--record-answers) instead of running the LLM\: no model is loaded, and the --backend-*delay* flags are the service time (a latency-model projection of another deployment answering with the recorded LLM'\''s tokens). A context never recorded is answered with an error the device falls back on, logged as a miss]:REPLAY_ANSWERS:_files' \
'--max-batch=[Most escalations per backend call (1..=1024)]:MAX_BATCH:_default' \
'--max-wait-ms=[Longest wait for a batch to fill, milliseconds (at most half a learned backend step)]:MAX_WAIT_MS:_default' \
'--queue-capacity=[Escalations queued or running before new ones get \`Busy\`]:QUEUE_CAPACITY:_default' \
'--max-batch-tokens=[Most tokens of prefill one backend call may cost; a longer prefill runs in steps of this size between other sessions'\'' batches]:MAX_BATCH_TOKENS:_default' \
'--ready-saturated-ms=[/readyz turns false after the queue has refused work this long without catching up, ms]:READY_SATURATED_MS:_default' \
'--ready-stalled-ms=[/readyz turns false while one backend call has run longer than this, ms]:READY_STALLED_MS:_default' \
'--max-sessions=[Sessions held in all, every device together; beyond it new sessions are refused]:MAX_SESSIONS:_default' \
'--max-connections-per-source=[Connections from one IP address at most (raise it to --max-connections behind a NAT or proxy that hides devices'\'' addresses)]:MAX_CONNECTIONS_PER_SOURCE:_default' \
'--stream-read-timeout-ms=[A request stream must deliver its frame within this time or it is reset, ms]:STREAM_READ_TIMEOUT_MS:_default' \
'--max-buffered-bytes-per-connection=[Bytes one connection may hold in unfinished frames]:MAX_BUFFERED_BYTES_PER_CONNECTION:_default' \
'--max-buffered-bytes=[Bytes all connections together may hold in unfinished frames]:MAX_BUFFERED_BYTES:_default' \
'--fair-share=[Between devices under overload\: \`device\` serves the device served the fewest LLM tokens first and refuses a device over its share first; \`off\` serves oldest first]:FAIR_SHARE:((device\:"The device served the fewest LLM tokens first; a device over its share hears \`Busy\` first"
off\:"Oldest first, every device'\''s work weighed alike"))' \
'--draft-verify=[How much of each draft the LLM checks\: \`whole\`, or \`by-load\`, a prefix that shortens while the queue is older than two batches (verifier time for more devices'\'' hard tokens)]:DRAFT_VERIFY:((whole\:"Every draft token the device sent (up to the protocol'\''s bound)"
by-load\:"A prefix that shortens as the queue ages past what one batch takes (\[\`verify_len\`\])"))' \
'*--engine=[External engine worker, KIND=URL (sglang, vllm or llamacpp), repeatable or comma-separated; KIND=dns+URL is one worker per address the URL'\''s host resolves to (a Kubernetes headless Service), re-resolved every --engine-resolve-interval-ms. Without one the embedded LLM serves]:ENGINES:_default' \
'--engine-tokenizer=[The devices'\'' tokenizer that engines are checked against\: tokenizer.json, a directory holding one, or a prepared model id \[default\: --model\]]:ENGINE_TOKENIZER:_default' \
'--engine-startup-secs=[How long to wait for an engine still loading its model, seconds\: at start-up for the first worker (the gateway serves once one has passed its check), later for each new one]:ENGINE_STARTUP_SECS:_default' \
'--engine-resolve-interval-ms=[How often dns+ engines'\'' names are resolved again (new addresses are checked, then serve; vanished ones are drained), ms (at least 100)]:ENGINE_RESOLVE_INTERVAL_MS:_default' \
'--engine-routing=[How a session'\''s escalations pick a worker\: sticky (rendezvous hashing, keeps the engine'\''s prefix cache) or round-robin (for comparison)]:ENGINE_ROUTING:((sticky\:"Each session to its rendezvous worker, for the engine'\''s prefix cache (the default)"
round-robin\:"Each request to the next eligible worker in turn, ignoring the session (a baseline)"))' \
'--engine-max-in-flight=[Requests in flight per worker before devices get \`Busy\`]:ENGINE_MAX_IN_FLIGHT:_default' \
'--engine-admission=[Admission to engine workers\: \`cost\` refuses \`Busy\` at once when no worker'\''s queue (its requests in flight, in tokens, at its learned time per token) lets an escalation be answered before its deadline; \`off\` sends it while a worker has room, to time out]:ENGINE_ADMISSION:((cost\:"\`Busy\` at once when no worker'\''s queue lets the escalation be answered before its deadline"
off\:"Sent while a worker has room (the in-flight bound alone), to time out"))' \
'--fair-line=[With --fair-share=device\: \`on\` lets a device refused for cost while within its share wait in line, the head of the line'\''s work kept for it; \`off\` refuses it like any other (the default\: the line lowers what the engine serves in all)]:FAIR_LINE:((on\:"On"
off\:"Off"))' \
'--engine-max-attempts=[Attempts per escalation, on different workers, while its deadline allows (1..=16)]:ENGINE_MAX_ATTEMPTS:_default' \
'--engine-breaker-failures=[Consecutive failures that open a worker'\''s circuit breaker]:ENGINE_BREAKER_FAILURES:_default' \
'--engine-breaker-open-ms=[How long an open breaker stays open before a trial request, ms]:ENGINE_BREAKER_OPEN_MS:_default' \
'--engine-health-interval-ms=[Interval between health checks of each worker, ms]:ENGINE_HEALTH_INTERVAL_MS:_default' \
'--drain-grace-secs=[Longest graceful drain (SIGTERM or POST /drain) from start to exit, seconds. Keep it below the orchestrator'\''s limit\: Kubernetes'\'' terminationGracePeriodSeconds must cover any preStop sleep + this + a few seconds (the default 20 fits its default 30)]:DRAIN_GRACE_SECS:_default' \
'--drain-redirect=[Where a drain sends devices (host\:port in GoAway); default\: to their own gateway list]:DRAIN_REDIRECT:_default' \
'--admin-token=[Bearer token for the HTTP side port'\''s POST /drain; without one /drain is refused]:ADMIN_TOKEN:_default' \
'--bundle-store=[Bundle store directory (rollout.json, bundles/), written by \`cloud-gateway fleet publish\` and shared by every replica (a volume); without it no bundles are offered]:BUNDLE_STORE:_files' \
'--bundle-poll-ms=[How often the bundle store is re-read, ms]:BUNDLE_POLL_MS:_default' \
'--operator-token-file=[File holding the bearer token of the side port'\''s GET /v1/fleet; without it /v1/fleet is refused]:OPERATOR_TOKEN_FILE:_files' \
'--log=[Log filter (tracing EnvFilter syntax)]:LOG:_default' \
'--otlp-endpoint=[Export traces (per escalation\: decode/validate, queue wait, batch, backend call, under the device'\''s span when it sent its trace context) over OTLP/HTTP to this collector, e.g. http\://127.0.0.1\:4318. Off by default; the standard OTEL_* variables apply too (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER(_ARG), ...)]:OTLP_ENDPOINT:_default' \
'--check[Check the settings (flags, environment, --config) and print them, then exit without loading a model or contacting an engine]' \
'--insecure-unverified-devices[Listen beyond loopback although devices are not verified (no --client-ca or --device-token-secret)\: any device may then act as any other. Without it the gateway refuses to start that way]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
'-V[Print version]' \
'--version[Print version]' \
":: :_cloud-gateway_commands" \
"*::: :->cloud-gateway" \
&& ret=0
    case $state in
    (cloud-gateway)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:cloud-gateway-command-$line[1]:"
        case $line[1] in
            (ca)
_arguments "${_arguments_options[@]}" : \
'-h[Print help]' \
'--help[Print help]' \
":: :_cloud-gateway__subcmd__ca_commands" \
"*::: :->ca" \
&& ret=0

    case $state in
    (ca)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:cloud-gateway-ca-command-$line[1]:"
        case $line[1] in
            (init-ca)
_arguments "${_arguments_options[@]}" : \
'--dir=[Directory for the CA]:DIR:_files' \
'--name=[The CA'\''s name (its certificate'\''s common name)]:NAME:_default' \
'--days=[How long the CA is valid, days]:DAYS:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(issue)
_arguments "${_arguments_options[@]}" : \
'--ca-dir=[The fleet CA'\''s directory]:CA_DIR:_files' \
'--device=[The device id (1..=128 bytes, no control characters)]:DEVICE:_default' \
'--days=[How long the certificate is valid, days]:DAYS:_default' \
'--out=[Directory to write the certificate and key into (must not hold an enrolment yet)]:OUT:_files' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(init-token-secret)
_arguments "${_arguments_options[@]}" : \
'--out=[The file to create (must not exist yet)]:OUT:_files' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(issue-token)
_arguments "${_arguments_options[@]}" : \
'--secret=[The secret file (the gateway'\''s --device-token-secret)]:SECRET:_files' \
'--device=[The device id (1..=128 bytes, no control characters)]:DEVICE:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(signing-key)
_arguments "${_arguments_options[@]}" : \
'--dir=[Directory for the key (may be the CA'\''s)]:DIR:_files' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(revoke)
_arguments "${_arguments_options[@]}" : \
'--revoked-file=[The gateway'\''s deny list (its --revoked-file); created if missing]:REVOKED_FILE:_files' \
'--crl=[The CRL to add to (the gateway'\''s --client-crl); created if missing, signed again]:CRL:_files' \
'--ca-dir=[The fleet CA'\''s directory, to sign the CRL (with --crl)]:CA_DIR:_files' \
'--reason=[Why, for the file'\''s comment]:REASON:_default' \
'-h[Print help]' \
'--help[Print help]' \
':entry -- A device id, or serial\:HEX for one certificate:_default' \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_cloud-gateway__subcmd__ca__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:cloud-gateway-ca-help-command-$line[1]:"
        case $line[1] in
            (init-ca)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(issue)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(init-token-secret)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(issue-token)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(signing-key)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(revoke)
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
;;
(fleet)
_arguments "${_arguments_options[@]}" : \
'-h[Print help]' \
'--help[Print help]' \
":: :_cloud-gateway__subcmd__fleet_commands" \
"*::: :->fleet" \
&& ret=0

    case $state in
    (fleet)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:cloud-gateway-fleet-command-$line[1]:"
        case $line[1] in
            (bundle)
_arguments "${_arguments_options[@]}" : \
'--router=[Router file from \`router-lab train\` (safetensors)]:ROUTER:_files' \
'--version=[The bundle'\''s version label (1..=64 of \[A-Za-z0-9._+-\]); devices report it]:BUNDLE_VERSION:_default' \
'--signing-key=[The signing key (\`cloud-gateway ca signing-key\` wrote bundle-signing.key)]:SIGNING_KEY:_files' \
'--out=[Where to write the bundle]:OUT:_files' \
'--slm=[The SLM it is for; default\: the router file'\''s. Given, it must agree with the file]:SLM:_default' \
'--tokenizer-fingerprint=[The SLM'\''s tokenizer fingerprint; default\: the router file'\''s]:TOKENIZER_FINGERPRINT:_default' \
'(--tau)--escalation-rate=[Devices escalate this share of tokens (through the router'\''s calibration table)]:ESCALATION_RATE:_default' \
'--tau=[Devices escalate below this fixed threshold instead]:TAU:_default' \
'--deadline-min-ms=[Devices'\'' shortest wait for a cloud token, ms]:DEADLINE_MIN_MS:_default' \
'--deadline-max-ms=[Devices'\'' longest wait for a cloud token, ms]:DEADLINE_MAX_MS:_default' \
'--speculate=[Tokens devices may decode ahead of an escalation in flight]:SPECULATE:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(publish)
_arguments "${_arguments_options[@]}" : \
'--bundle-store=[The bundle store the gateways serve (their --bundle-store)]:BUNDLE_STORE:_files' \
'--to=[Share of the SLM'\''s devices, percent (1..=100)]:TO:_default' \
'--bundle-key=[Check the signature with this public key (bundle-signing.pub) before publishing]:BUNDLE_KEY:_files' \
'-h[Print help]' \
'--help[Print help]' \
':bundle -- The bundle file (`fleet bundle` made it):_files' \
&& ret=0
;;
(status)
_arguments "${_arguments_options[@]}" : \
'--bundle-store=[The bundle store]:BUNDLE_STORE:_files' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_cloud-gateway__subcmd__fleet__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:cloud-gateway-fleet-help-command-$line[1]:"
        case $line[1] in
            (bundle)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(publish)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(status)
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
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_cloud-gateway__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:cloud-gateway-help-command-$line[1]:"
        case $line[1] in
            (ca)
_arguments "${_arguments_options[@]}" : \
":: :_cloud-gateway__subcmd__help__subcmd__ca_commands" \
"*::: :->ca" \
&& ret=0

    case $state in
    (ca)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:cloud-gateway-help-ca-command-$line[1]:"
        case $line[1] in
            (init-ca)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(issue)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(init-token-secret)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(issue-token)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(signing-key)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(revoke)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
(fleet)
_arguments "${_arguments_options[@]}" : \
":: :_cloud-gateway__subcmd__help__subcmd__fleet_commands" \
"*::: :->fleet" \
&& ret=0

    case $state in
    (fleet)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:cloud-gateway-help-fleet-command-$line[1]:"
        case $line[1] in
            (bundle)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(publish)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(status)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
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

(( $+functions[_cloud-gateway_commands] )) ||
_cloud-gateway_commands() {
    local commands; commands=(
'ca:Device identity administration\: the fleet CA, device certificates, revocation' \
'fleet:Router bundles and their rollout to the fleet' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'cloud-gateway commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca_commands] )) ||
_cloud-gateway__subcmd__ca_commands() {
    local commands; commands=(
'init-ca:Create the fleet CA (ca-cert.pem, ca-key.pem) in a new directory. Give the gateway ca-cert.pem as --client-ca; keep ca-key.pem off the gateway' \
'issue:Issue a device its certificate and key (device-cert.pem, device-key.pem in --out)\: the device id is the certificate'\''s subject common name. Install them on the device as edge-node'\''s --client-cert and --client-key' \
'init-token-secret:Create the secret per-device tokens are issued from (hex, mode 0600) at --out. Give the gateway --device-token-secret FILE; keep it as secret as a CA key' \
'issue-token:Print a device'\''s token, issued from the secret\: the device presents it as edge-node'\''s --auth-token (DUET_AUTH_TOKEN), and it opens that device id only' \
'signing-key:Create the Ed25519 key that signs router bundles (bundle-signing.key, mode 0600, and bundle-signing.pub) in --dir. Devices trust bundle-signing.pub (edge-node --bundle-key); keep the private key where bundles are made, off gateways and devices' \
'revoke:Revoke a device (all its certificates) or one certificate (serial\:HEX, as \`issue\` printed it)\: in the deny list the gateway reloads (--revoked-file), in a CRL the fleet CA signs (--crl with --ca-dir; a device id revokes the certificates issued to it so far), or both' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'cloud-gateway ca commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__help_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__help_commands() {
    local commands; commands=(
'init-ca:Create the fleet CA (ca-cert.pem, ca-key.pem) in a new directory. Give the gateway ca-cert.pem as --client-ca; keep ca-key.pem off the gateway' \
'issue:Issue a device its certificate and key (device-cert.pem, device-key.pem in --out)\: the device id is the certificate'\''s subject common name. Install them on the device as edge-node'\''s --client-cert and --client-key' \
'init-token-secret:Create the secret per-device tokens are issued from (hex, mode 0600) at --out. Give the gateway --device-token-secret FILE; keep it as secret as a CA key' \
'issue-token:Print a device'\''s token, issued from the secret\: the device presents it as edge-node'\''s --auth-token (DUET_AUTH_TOKEN), and it opens that device id only' \
'signing-key:Create the Ed25519 key that signs router bundles (bundle-signing.key, mode 0600, and bundle-signing.pub) in --dir. Devices trust bundle-signing.pub (edge-node --bundle-key); keep the private key where bundles are made, off gateways and devices' \
'revoke:Revoke a device (all its certificates) or one certificate (serial\:HEX, as \`issue\` printed it)\: in the deny list the gateway reloads (--revoked-file), in a CRL the fleet CA signs (--crl with --ca-dir; a device id revokes the certificates issued to it so far), or both' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'cloud-gateway ca help commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__help__subcmd__help_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca help help commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__help__subcmd__init-ca_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__help__subcmd__init-ca_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca help init-ca commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__help__subcmd__init-token-secret_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__help__subcmd__init-token-secret_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca help init-token-secret commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__help__subcmd__issue_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__help__subcmd__issue_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca help issue commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__help__subcmd__issue-token_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__help__subcmd__issue-token_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca help issue-token commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__help__subcmd__revoke_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__help__subcmd__revoke_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca help revoke commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__help__subcmd__signing-key_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__help__subcmd__signing-key_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca help signing-key commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__init-ca_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__init-ca_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca init-ca commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__init-token-secret_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__init-token-secret_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca init-token-secret commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__issue_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__issue_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca issue commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__issue-token_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__issue-token_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca issue-token commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__revoke_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__revoke_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca revoke commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__ca__subcmd__signing-key_commands] )) ||
_cloud-gateway__subcmd__ca__subcmd__signing-key_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway ca signing-key commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__fleet_commands] )) ||
_cloud-gateway__subcmd__fleet_commands() {
    local commands; commands=(
'bundle:Make a signed bundle\: a router file and the device settings to run it with, for the SLM and tokenizer the router file names' \
'publish:Publish a bundle to a share of its SLM'\''s devices (stable by device id\: the same devices at every replica and after restarts; raising the share keeps them in)' \
'status:Show what the bundle store rolls out' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'cloud-gateway fleet commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__fleet__subcmd__bundle_commands] )) ||
_cloud-gateway__subcmd__fleet__subcmd__bundle_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway fleet bundle commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__fleet__subcmd__help_commands] )) ||
_cloud-gateway__subcmd__fleet__subcmd__help_commands() {
    local commands; commands=(
'bundle:Make a signed bundle\: a router file and the device settings to run it with, for the SLM and tokenizer the router file names' \
'publish:Publish a bundle to a share of its SLM'\''s devices (stable by device id\: the same devices at every replica and after restarts; raising the share keeps them in)' \
'status:Show what the bundle store rolls out' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'cloud-gateway fleet help commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__fleet__subcmd__help__subcmd__bundle_commands] )) ||
_cloud-gateway__subcmd__fleet__subcmd__help__subcmd__bundle_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway fleet help bundle commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__fleet__subcmd__help__subcmd__help_commands] )) ||
_cloud-gateway__subcmd__fleet__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway fleet help help commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__fleet__subcmd__help__subcmd__publish_commands] )) ||
_cloud-gateway__subcmd__fleet__subcmd__help__subcmd__publish_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway fleet help publish commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__fleet__subcmd__help__subcmd__status_commands] )) ||
_cloud-gateway__subcmd__fleet__subcmd__help__subcmd__status_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway fleet help status commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__fleet__subcmd__publish_commands] )) ||
_cloud-gateway__subcmd__fleet__subcmd__publish_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway fleet publish commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__fleet__subcmd__status_commands] )) ||
_cloud-gateway__subcmd__fleet__subcmd__status_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway fleet status commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help_commands] )) ||
_cloud-gateway__subcmd__help_commands() {
    local commands; commands=(
'ca:Device identity administration\: the fleet CA, device certificates, revocation' \
'fleet:Router bundles and their rollout to the fleet' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'cloud-gateway help commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__ca_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__ca_commands() {
    local commands; commands=(
'init-ca:Create the fleet CA (ca-cert.pem, ca-key.pem) in a new directory. Give the gateway ca-cert.pem as --client-ca; keep ca-key.pem off the gateway' \
'issue:Issue a device its certificate and key (device-cert.pem, device-key.pem in --out)\: the device id is the certificate'\''s subject common name. Install them on the device as edge-node'\''s --client-cert and --client-key' \
'init-token-secret:Create the secret per-device tokens are issued from (hex, mode 0600) at --out. Give the gateway --device-token-secret FILE; keep it as secret as a CA key' \
'issue-token:Print a device'\''s token, issued from the secret\: the device presents it as edge-node'\''s --auth-token (DUET_AUTH_TOKEN), and it opens that device id only' \
'signing-key:Create the Ed25519 key that signs router bundles (bundle-signing.key, mode 0600, and bundle-signing.pub) in --dir. Devices trust bundle-signing.pub (edge-node --bundle-key); keep the private key where bundles are made, off gateways and devices' \
'revoke:Revoke a device (all its certificates) or one certificate (serial\:HEX, as \`issue\` printed it)\: in the deny list the gateway reloads (--revoked-file), in a CRL the fleet CA signs (--crl with --ca-dir; a device id revokes the certificates issued to it so far), or both' \
    )
    _describe -t commands 'cloud-gateway help ca commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__ca__subcmd__init-ca_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__ca__subcmd__init-ca_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway help ca init-ca commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__ca__subcmd__init-token-secret_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__ca__subcmd__init-token-secret_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway help ca init-token-secret commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__ca__subcmd__issue_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__ca__subcmd__issue_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway help ca issue commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__ca__subcmd__issue-token_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__ca__subcmd__issue-token_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway help ca issue-token commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__ca__subcmd__revoke_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__ca__subcmd__revoke_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway help ca revoke commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__ca__subcmd__signing-key_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__ca__subcmd__signing-key_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway help ca signing-key commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__fleet_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__fleet_commands() {
    local commands; commands=(
'bundle:Make a signed bundle\: a router file and the device settings to run it with, for the SLM and tokenizer the router file names' \
'publish:Publish a bundle to a share of its SLM'\''s devices (stable by device id\: the same devices at every replica and after restarts; raising the share keeps them in)' \
'status:Show what the bundle store rolls out' \
    )
    _describe -t commands 'cloud-gateway help fleet commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__fleet__subcmd__bundle_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__fleet__subcmd__bundle_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway help fleet bundle commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__fleet__subcmd__publish_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__fleet__subcmd__publish_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway help fleet publish commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__fleet__subcmd__status_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__fleet__subcmd__status_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway help fleet status commands' commands "$@"
}
(( $+functions[_cloud-gateway__subcmd__help__subcmd__help_commands] )) ||
_cloud-gateway__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'cloud-gateway help help commands' commands "$@"
}

if [ "$funcstack[1]" = "_cloud-gateway" ]; then
    _cloud-gateway "$@"
else
    compdef _cloud-gateway cloud-gateway
fi
