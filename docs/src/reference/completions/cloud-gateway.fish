# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_cloud_gateway_global_optspecs
    string join \n config= check listen= http-listen= tls-cert= tls-key= write-cert= max-frame-bytes= max-connections= gateway-id= auth-token= client-ca= device-token-secret= insecure-unverified-devices revoked-file= revoked-poll-ms= client-crl= device-rate-limit= device-rate-burst= max-sessions-per-device= session-idle-secs= model= threads= max-context= kv-cache-sessions= backend-delay-ms= backend-token-delay-us= backend-draft-token-delay-us= record-answers= replay-answers= max-batch= max-wait-ms= queue-capacity= max-batch-tokens= ready-saturated-ms= ready-stalled-ms= max-sessions= max-connections-per-source= stream-read-timeout-ms= max-buffered-bytes-per-connection= max-buffered-bytes= fair-share= draft-verify= engine= engine-tokenizer= engine-startup-secs= engine-resolve-interval-ms= engine-routing= engine-max-in-flight= engine-admission= fair-line= engine-max-attempts= engine-breaker-failures= engine-breaker-open-ms= engine-health-interval-ms= drain-grace-secs= drain-redirect= admin-token= bundle-store= bundle-poll-ms= operator-token-file= log= otlp-endpoint= h/help V/version
end

function __fish_cloud_gateway_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_cloud_gateway_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_cloud_gateway_using_subcommand
    set -l cmd (__fish_cloud_gateway_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l config -d 'TOML file of settings, one table per section below (`[transport]`, `[identity]`, `[sessions]`, `[embedded]`, `[batcher]`, `[overload]`, `[engines]`, `[drain]`, `[fleet]`, `[telemetry]`); keys are the flags\' long names (`engine` takes an array). Unknown sections and keys are refused by name. Flags and DUET_* variables override it' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l listen -d 'UDP address for QUIC' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l http-listen -d 'TCP address of the HTTP side port (/metrics, /healthz, /readyz); "off" disables it' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l tls-cert -d 'TLS certificate chain (PEM). Without it a self-signed certificate is generated' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l tls-key -d 'TLS private key (PEM)' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l write-cert -d 'Where to write the self-signed certificate (PEM) for devices\' --ca-cert [default: $DUET_HOME/gateway-cert.pem]. Its key is kept beside it (gateway-key.pem) and both are reused on restart, so devices that pinned it reconnect' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-frame-bytes -d 'Largest accepted frame, bytes' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-connections -d 'Connected devices at most; beyond it devices are refused as overloaded' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l gateway-id -d 'Gateway name announced to devices' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l auth-token -d 'Shared secret devices must present; unset accepts any device. Without --client-ca or --device-token-secret this is a development mode: any device knowing it may claim any device id' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l client-ca -d 'The fleet CA\'s certificate (PEM, `cloud-gateway ca init-ca`): devices must present a certificate it issued (mutual TLS), and their id is the certificate\'s subject common name, never what they claim' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l device-token-secret -d 'File with the secret per-device tokens are issued from (`cloud-gateway ca init-token-secret`; `ca issue-token` issues one): a device\'s --auth-token must be the token of its own id. For devices that cannot hold a certificate' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l revoked-file -d 'Deny list: device ids and serial:HEX certificate serials, one per line (`cloud-gateway ca revoke` appends). Reloaded on change and on SIGHUP; revoked devices are refused and disconnected' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l revoked-poll-ms -d 'How often the deny list\'s and the CRLs\' files are checked for changes, ms' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l client-crl -d 'Certificate revocation lists signed by the fleet CA (PEM or DER; `cloud-gateway ca revoke --crl` writes one), checked in the TLS handshake with --client-ca. Several: repeat the flag or separate with commas. Reloaded on change and on SIGHUP' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l device-rate-limit -d 'Escalations per second each device may sustain (0 = no limit); beyond it `Busy`' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l device-rate-burst -d 'Escalations a device may make at once above its rate' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-sessions-per-device -d 'Sessions one device may hold' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l session-idle-secs -d 'Idle seconds after which a session is dropped' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l model -d 'LLM for the embedded backend: prepared model id or directory' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l threads -d 'ONNX Runtime intra-op threads (0 = all cores)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-context -d 'Longest session context, tokens' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l kv-cache-sessions -d 'Sessions whose LLM KV cache is kept (LRU)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l backend-delay-ms -d 'Extra service time added to every backend call, ms (simulates a slow or remote LLM)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l backend-token-delay-us -d 'Extra service time per token of prefill, µs (simulates a large LLM\'s prefill cost)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l backend-draft-token-delay-us -d 'Extra service time per draft token checked, µs (a draft runs in the same pass as the prefill; simulates a large LLM\'s cost of checking it)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l record-answers -d 'Write every greedy answer of the embedded LLM (and each draft position it accepted) to this file, for --replay-answers; an existing recording of the same model is extended' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l replay-answers -d 'Answer from a recording (--record-answers) instead of running the LLM: no model is loaded, and the --backend-*delay* flags are the service time (a latency-model projection of another deployment answering with the recorded LLM\'s tokens). A context never recorded is answered with an error the device falls back on, logged as a miss' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-batch -d 'Most escalations per backend call (1..=1024)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-wait-ms -d 'Longest wait for a batch to fill, milliseconds (at most half a learned backend step)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l queue-capacity -d 'Escalations queued or running before new ones get `Busy`' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-batch-tokens -d 'Most tokens of prefill one backend call may cost; a longer prefill runs in steps of this size between other sessions\' batches' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l ready-saturated-ms -d '/readyz turns false after the queue has refused work this long without catching up, ms' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l ready-stalled-ms -d '/readyz turns false while one backend call has run longer than this, ms' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-sessions -d 'Sessions held in all, every device together; beyond it new sessions are refused' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-connections-per-source -d 'Connections from one IP address at most (raise it to --max-connections behind a NAT or proxy that hides devices\' addresses)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l stream-read-timeout-ms -d 'A request stream must deliver its frame within this time or it is reset, ms' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-buffered-bytes-per-connection -d 'Bytes one connection may hold in unfinished frames' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l max-buffered-bytes -d 'Bytes all connections together may hold in unfinished frames' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l fair-share -d 'Between devices under overload: `device` serves the device served the fewest LLM tokens first and refuses a device over its share first; `off` serves oldest first' -r -f -a "device\t'The device served the fewest LLM tokens first; a device over its share hears `Busy` first'
off\t'Oldest first, every device\'s work weighed alike'"
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l draft-verify -d 'How much of each draft the LLM checks: `whole`, or `by-load`, a prefix that shortens while the queue is older than two batches (verifier time for more devices\' hard tokens)' -r -f -a "whole\t'Every draft token the device sent (up to the protocol\'s bound)'
by-load\t'A prefix that shortens as the queue ages past what one batch takes ([`verify_len`])'"
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine -d 'External engine worker, KIND=URL (sglang, vllm or llamacpp), repeatable or comma-separated; KIND=dns+URL is one worker per address the URL\'s host resolves to (a Kubernetes headless Service), re-resolved every --engine-resolve-interval-ms. Without one the embedded LLM serves' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine-tokenizer -d 'The devices\' tokenizer that engines are checked against: tokenizer.json, a directory holding one, or a prepared model id [default: --model]' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine-startup-secs -d 'How long to wait for an engine still loading its model, seconds: at start-up for the first worker (the gateway serves once one has passed its check), later for each new one' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine-resolve-interval-ms -d 'How often dns+ engines\' names are resolved again (new addresses are checked, then serve; vanished ones are drained), ms (at least 100)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine-routing -d 'How a session\'s escalations pick a worker: sticky (rendezvous hashing, keeps the engine\'s prefix cache) or round-robin (for comparison)' -r -f -a "sticky\t'Each session to its rendezvous worker, for the engine\'s prefix cache (the default)'
round-robin\t'Each request to the next eligible worker in turn, ignoring the session (a baseline)'"
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine-max-in-flight -d 'Requests in flight per worker before devices get `Busy`' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine-admission -d 'Admission to engine workers: `cost` refuses `Busy` at once when no worker\'s queue (its requests in flight, in tokens, at its learned time per token) lets an escalation be answered before its deadline; `off` sends it while a worker has room, to time out' -r -f -a "cost\t'`Busy` at once when no worker\'s queue lets the escalation be answered before its deadline'
off\t'Sent while a worker has room (the in-flight bound alone), to time out'"
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l fair-line -d 'With --fair-share=device: `on` lets a device refused for cost while within its share wait in line, the head of the line\'s work kept for it; `off` refuses it like any other (the default: the line lowers what the engine serves in all)' -r -f -a "on\t'On'
off\t'Off'"
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine-max-attempts -d 'Attempts per escalation, on different workers, while its deadline allows (1..=16)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine-breaker-failures -d 'Consecutive failures that open a worker\'s circuit breaker' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine-breaker-open-ms -d 'How long an open breaker stays open before a trial request, ms' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l engine-health-interval-ms -d 'Interval between health checks of each worker, ms' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l drain-grace-secs -d 'Longest graceful drain (SIGTERM or POST /drain) from start to exit, seconds. Keep it below the orchestrator\'s limit: Kubernetes\' terminationGracePeriodSeconds must cover any preStop sleep + this + a few seconds (the default 20 fits its default 30)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l drain-redirect -d 'Where a drain sends devices (host:port in GoAway); default: to their own gateway list' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l admin-token -d 'Bearer token for the HTTP side port\'s POST /drain; without one /drain is refused' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l bundle-store -d 'Bundle store directory (rollout.json, bundles/), written by `cloud-gateway fleet publish` and shared by every replica (a volume); without it no bundles are offered' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l bundle-poll-ms -d 'How often the bundle store is re-read, ms' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l operator-token-file -d 'File holding the bearer token of the side port\'s GET /v1/fleet; without it /v1/fleet is refused' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l log -d 'Log filter (tracing EnvFilter syntax)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l otlp-endpoint -d 'Export traces (per escalation: decode/validate, queue wait, batch, backend call, under the device\'s span when it sent its trace context) over OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318. Off by default; the standard OTEL_* variables apply too (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER(_ARG), ...)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l check -d 'Check the settings (flags, environment, --config) and print them, then exit without loading a model or contacting an engine'
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -l insecure-unverified-devices -d 'Listen beyond loopback although devices are not verified (no --client-ca or --device-token-secret): any device may then act as any other. Without it the gateway refuses to start that way'
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -s V -l version -d 'Print version'
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -f -a "ca" -d 'Device identity administration: the fleet CA, device certificates, revocation'
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -f -a "fleet" -d 'Router bundles and their rollout to the fleet'
complete -c cloud-gateway -n "__fish_cloud_gateway_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and not __fish_seen_subcommand_from init-ca issue init-token-secret issue-token signing-key revoke help" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and not __fish_seen_subcommand_from init-ca issue init-token-secret issue-token signing-key revoke help" -f -a "init-ca" -d 'Create the fleet CA (ca-cert.pem, ca-key.pem) in a new directory. Give the gateway ca-cert.pem as --client-ca; keep ca-key.pem off the gateway'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and not __fish_seen_subcommand_from init-ca issue init-token-secret issue-token signing-key revoke help" -f -a "issue" -d 'Issue a device its certificate and key (device-cert.pem, device-key.pem in --out): the device id is the certificate\'s subject common name. Install them on the device as edge-node\'s --client-cert and --client-key'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and not __fish_seen_subcommand_from init-ca issue init-token-secret issue-token signing-key revoke help" -f -a "init-token-secret" -d 'Create the secret per-device tokens are issued from (hex, mode 0600) at --out. Give the gateway --device-token-secret FILE; keep it as secret as a CA key'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and not __fish_seen_subcommand_from init-ca issue init-token-secret issue-token signing-key revoke help" -f -a "issue-token" -d 'Print a device\'s token, issued from the secret: the device presents it as edge-node\'s --auth-token (DUET_AUTH_TOKEN), and it opens that device id only'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and not __fish_seen_subcommand_from init-ca issue init-token-secret issue-token signing-key revoke help" -f -a "signing-key" -d 'Create the Ed25519 key that signs router bundles (bundle-signing.key, mode 0600, and bundle-signing.pub) in --dir. Devices trust bundle-signing.pub (edge-node --bundle-key); keep the private key where bundles are made, off gateways and devices'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and not __fish_seen_subcommand_from init-ca issue init-token-secret issue-token signing-key revoke help" -f -a "revoke" -d 'Revoke a device (all its certificates) or one certificate (serial:HEX, as `issue` printed it): in the deny list the gateway reloads (--revoked-file), in a CRL the fleet CA signs (--crl with --ca-dir; a device id revokes the certificates issued to it so far), or both'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and not __fish_seen_subcommand_from init-ca issue init-token-secret issue-token signing-key revoke help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from init-ca" -l dir -d 'Directory for the CA' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from init-ca" -l name -d 'The CA\'s name (its certificate\'s common name)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from init-ca" -l days -d 'How long the CA is valid, days' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from init-ca" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from issue" -l ca-dir -d 'The fleet CA\'s directory' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from issue" -l device -d 'The device id (1..=128 bytes, no control characters)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from issue" -l days -d 'How long the certificate is valid, days' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from issue" -l out -d 'Directory to write the certificate and key into (must not hold an enrolment yet)' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from issue" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from init-token-secret" -l out -d 'The file to create (must not exist yet)' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from init-token-secret" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from issue-token" -l secret -d 'The secret file (the gateway\'s --device-token-secret)' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from issue-token" -l device -d 'The device id (1..=128 bytes, no control characters)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from issue-token" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from signing-key" -l dir -d 'Directory for the key (may be the CA\'s)' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from signing-key" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from revoke" -l revoked-file -d 'The gateway\'s deny list (its --revoked-file); created if missing' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from revoke" -l crl -d 'The CRL to add to (the gateway\'s --client-crl); created if missing, signed again' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from revoke" -l ca-dir -d 'The fleet CA\'s directory, to sign the CRL (with --crl)' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from revoke" -l reason -d 'Why, for the file\'s comment' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from revoke" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from help" -f -a "init-ca" -d 'Create the fleet CA (ca-cert.pem, ca-key.pem) in a new directory. Give the gateway ca-cert.pem as --client-ca; keep ca-key.pem off the gateway'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from help" -f -a "issue" -d 'Issue a device its certificate and key (device-cert.pem, device-key.pem in --out): the device id is the certificate\'s subject common name. Install them on the device as edge-node\'s --client-cert and --client-key'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from help" -f -a "init-token-secret" -d 'Create the secret per-device tokens are issued from (hex, mode 0600) at --out. Give the gateway --device-token-secret FILE; keep it as secret as a CA key'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from help" -f -a "issue-token" -d 'Print a device\'s token, issued from the secret: the device presents it as edge-node\'s --auth-token (DUET_AUTH_TOKEN), and it opens that device id only'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from help" -f -a "signing-key" -d 'Create the Ed25519 key that signs router bundles (bundle-signing.key, mode 0600, and bundle-signing.pub) in --dir. Devices trust bundle-signing.pub (edge-node --bundle-key); keep the private key where bundles are made, off gateways and devices'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from help" -f -a "revoke" -d 'Revoke a device (all its certificates) or one certificate (serial:HEX, as `issue` printed it): in the deny list the gateway reloads (--revoked-file), in a CRL the fleet CA signs (--crl with --ca-dir; a device id revokes the certificates issued to it so far), or both'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand ca; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and not __fish_seen_subcommand_from bundle publish status help" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and not __fish_seen_subcommand_from bundle publish status help" -f -a "bundle" -d 'Make a signed bundle: a router file and the device settings to run it with, for the SLM and tokenizer the router file names'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and not __fish_seen_subcommand_from bundle publish status help" -f -a "publish" -d 'Publish a bundle to a share of its SLM\'s devices (stable by device id: the same devices at every replica and after restarts; raising the share keeps them in)'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and not __fish_seen_subcommand_from bundle publish status help" -f -a "status" -d 'Show what the bundle store rolls out'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and not __fish_seen_subcommand_from bundle publish status help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l router -d 'Router file from `router-lab train` (safetensors)' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l version -d 'The bundle\'s version label (1..=64 of [A-Za-z0-9._+-]); devices report it' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l signing-key -d 'The signing key (`cloud-gateway ca signing-key` wrote bundle-signing.key)' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l out -d 'Where to write the bundle' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l slm -d 'The SLM it is for; default: the router file\'s. Given, it must agree with the file' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l tokenizer-fingerprint -d 'The SLM\'s tokenizer fingerprint; default: the router file\'s' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l escalation-rate -d 'Devices escalate this share of tokens (through the router\'s calibration table)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l tau -d 'Devices escalate below this fixed threshold instead' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l deadline-min-ms -d 'Devices\' shortest wait for a cloud token, ms' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l deadline-max-ms -d 'Devices\' longest wait for a cloud token, ms' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -l speculate -d 'Tokens devices may decode ahead of an escalation in flight' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from bundle" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from publish" -l bundle-store -d 'The bundle store the gateways serve (their --bundle-store)' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from publish" -l to -d 'Share of the SLM\'s devices, percent (1..=100)' -r
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from publish" -l bundle-key -d 'Check the signature with this public key (bundle-signing.pub) before publishing' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from publish" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from status" -l bundle-store -d 'The bundle store' -r -F
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from status" -s h -l help -d 'Print help'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from help" -f -a "bundle" -d 'Make a signed bundle: a router file and the device settings to run it with, for the SLM and tokenizer the router file names'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from help" -f -a "publish" -d 'Publish a bundle to a share of its SLM\'s devices (stable by device id: the same devices at every replica and after restarts; raising the share keeps them in)'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from help" -f -a "status" -d 'Show what the bundle store rolls out'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand fleet; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and not __fish_seen_subcommand_from ca fleet help" -f -a "ca" -d 'Device identity administration: the fleet CA, device certificates, revocation'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and not __fish_seen_subcommand_from ca fleet help" -f -a "fleet" -d 'Router bundles and their rollout to the fleet'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and not __fish_seen_subcommand_from ca fleet help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and __fish_seen_subcommand_from ca" -f -a "init-ca" -d 'Create the fleet CA (ca-cert.pem, ca-key.pem) in a new directory. Give the gateway ca-cert.pem as --client-ca; keep ca-key.pem off the gateway'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and __fish_seen_subcommand_from ca" -f -a "issue" -d 'Issue a device its certificate and key (device-cert.pem, device-key.pem in --out): the device id is the certificate\'s subject common name. Install them on the device as edge-node\'s --client-cert and --client-key'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and __fish_seen_subcommand_from ca" -f -a "init-token-secret" -d 'Create the secret per-device tokens are issued from (hex, mode 0600) at --out. Give the gateway --device-token-secret FILE; keep it as secret as a CA key'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and __fish_seen_subcommand_from ca" -f -a "issue-token" -d 'Print a device\'s token, issued from the secret: the device presents it as edge-node\'s --auth-token (DUET_AUTH_TOKEN), and it opens that device id only'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and __fish_seen_subcommand_from ca" -f -a "signing-key" -d 'Create the Ed25519 key that signs router bundles (bundle-signing.key, mode 0600, and bundle-signing.pub) in --dir. Devices trust bundle-signing.pub (edge-node --bundle-key); keep the private key where bundles are made, off gateways and devices'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and __fish_seen_subcommand_from ca" -f -a "revoke" -d 'Revoke a device (all its certificates) or one certificate (serial:HEX, as `issue` printed it): in the deny list the gateway reloads (--revoked-file), in a CRL the fleet CA signs (--crl with --ca-dir; a device id revokes the certificates issued to it so far), or both'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and __fish_seen_subcommand_from fleet" -f -a "bundle" -d 'Make a signed bundle: a router file and the device settings to run it with, for the SLM and tokenizer the router file names'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and __fish_seen_subcommand_from fleet" -f -a "publish" -d 'Publish a bundle to a share of its SLM\'s devices (stable by device id: the same devices at every replica and after restarts; raising the share keeps them in)'
complete -c cloud-gateway -n "__fish_cloud_gateway_using_subcommand help; and __fish_seen_subcommand_from fleet" -f -a "status" -d 'Show what the bundle store rolls out'
