# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_edge_node_global_optspecs
    string join \n config= log= otlp-endpoint= h/help V/version
end

function __fish_edge_node_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_edge_node_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_edge_node_using_subcommand
    set -l cmd (__fish_edge_node_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c edge-node -n "__fish_edge_node_needs_command" -l config -d 'A TOML file of settings for the subcommand (keys: its long flag names; unknown keys are refused). Command-line flags and `DUET_*` variables override it' -r -F
complete -c edge-node -n "__fish_edge_node_needs_command" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `edge_node=debug`' -r
complete -c edge-node -n "__fish_edge_node_needs_command" -l otlp-endpoint -d 'Export traces (a span per generation and per escalation; sampled escalations carry their trace context to the gateway) over OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318. Off by default; the standard OTEL_* variables apply too' -r
complete -c edge-node -n "__fish_edge_node_needs_command" -s h -l help -d 'Print help'
complete -c edge-node -n "__fish_edge_node_needs_command" -s V -l version -d 'Print version'
complete -c edge-node -n "__fish_edge_node_needs_command" -f -a "generate" -d 'Generate text for a prompt, streaming tokens to stdout as they are produced'
complete -c edge-node -n "__fish_edge_node_needs_command" -f -a "bench" -d 'Measure prefill and decode speed of a model on this machine'
complete -c edge-node -n "__fish_edge_node_needs_command" -f -a "serve" -d 'Serve the OpenAI API (chat and text completions, streaming) on a local port for apps on this device, routing hard tokens to the cloud as `generate` does'
complete -c edge-node -n "__fish_edge_node_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l model -d 'Model id prepared under $DUET_HOME/models, or a model directory' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l threads -d 'ONNX Runtime intra-op threads (0 = one per core)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l max-context -d 'Largest context (prompt + generated tokens); sizes the KV cache' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l huge-pages -d 'Back the model\'s weights with transparent huge pages once loaded (faster decoding where the kernel allows them); `off` to measure the difference' -r -f -a "on\t''
off\t''"
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l prompt -d 'The prompt text' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l system -d 'System prompt for --chat (default: the model\'s own)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l max-new-tokens -d 'Most tokens to generate' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l temperature -d 'Sampling temperature; 0 = greedy' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l top-k -d 'Sample only among the k most likely tokens (0 = all)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l top-p -d 'Nucleus sampling mass (1.0 = off)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l seed -d 'Seed for reproducible sampling' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l gateway -d 'Gateway address (host:port), or several replicas separated by commas (a,b: a random one first, the others on connection loss or GoAway; names are re-resolved on every reconnect, so a DNS name with several records works too); without it generation is local-only' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l tau -d 'Escalate a token when the router\'s confidence is below tau (0 = never, 1 = always). Default: the trained router\'s --escalation-rate default, or 0.5 for `confidence`' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l escalation-rate -d 'Instead of --tau: the share of tokens to escalate, turned into tau by the trained router\'s calibration table. Default 0.1 (the operating point EVALUATION.md reports)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l rate-control -d 'How an escalation rate is held (not --tau, which is always fixed): `carry` steers tau toward the rate from what is actually escalated, carrying what it learned from session to session in this process (the requests of `serve`, the items of an evaluation); `session` starts each session afresh at the calibrated tau; `off` keeps the calibrated tau fixed (docs/ARCHITECTURE.md, "Holding the escalation rate")' -r -f -a "off\t'The calibrated tau, fixed (the realized share drifts with the text)'
session\t'Steered within each session, each starting at the calibrated tau'
carry\t'Steered, and carried across the sessions of this process'"
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l router -d 'Routing policy: `default` (the trained router shipped for this SLM, else `confidence`), `confidence` (the SLM\'s top probability), or a router file from `router-lab train` made for this SLM' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l ca-cert -d 'The gateway\'s certificate (PEM); default: $DUET_HOME/gateway-cert.pem, which a local gateway writes' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l server-name -d 'TLS name of the gateway' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l auth-token -d 'Shared secret the gateway expects (a gateway without mutual TLS: development)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l client-cert -d 'This device\'s certificate (PEM, from `cloud-gateway ca issue`), for a gateway that requires mutual TLS: the gateway knows the device by it' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l client-key -d 'This device\'s private key (PEM), with --client-cert' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l client-cert-poll-ms -d 'How often the --client-cert and --client-key files are checked for a rotated pair, ms (0: never; `serve` also reloads them on SIGHUP). The next connection uses the new pair; the live one keeps its certificate' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l device-id -d 'This device\'s id (default: host name and process id)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l quic-idle-timeout-ms -d 'How long the connection to the gateway may stay silent before it is closed and the link reconnects, ms (keep-alives go every 2 s, so at least 4000). Longer rides out a path that drops packets for a while; shorter notices a gone gateway sooner' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l connect-wait-ms -d 'How long to wait for the first connection before starting (generation never waits later)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l deadline-min-ms -d 'Shortest wait for a cloud token, ms' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l deadline-max-ms -d 'Longest wait for a cloud token, ms: past it the SLM\'s token is used' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l deadline-per-token-ms -d 'Expected LLM time per context token sent, ms, until the gateway\'s answers measure it (lengthens the deadline of long deltas)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l speculate -d 'While a hard token is at the gateway, let the SLM decode up to this many tokens ahead from its own token (kept when the cloud agrees, rolled back when not; the output is the same either way). 0 waits for every answer. 8 by default: on a coding prompt it keeps 0.67x of local-only speed where waiting keeps 0.59x (0.63x and 0.51x at 50 ms RTT); neutral on CommonsenseQA (docs/src/benchmarks/end-to-end.md, "Hiding the network")' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l draft -d 'Send the SLM\'s continuation with each hard token for the LLM to check in the same round trip (protocol v5; several LLM-checked tokens per escalation): off, or adaptive (the draft length follows acceptance and answer time, none while the link is degraded). Gateways older than v5 get plain escalations either way. Off by default until measured (docs/src/benchmarks/draft-verification.md)' -r -f -a "off\t'One token per escalation, as before protocol v5'
adaptive\t'Drafts whose length follows acceptance and the answer time ([`DraftControl`])'"
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l color -d 'Highlight cloud tokens: auto (when stdout is a terminal), always, never (`generate` only: `serve` prints no tokens and refuses it)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l config -d 'A TOML file of settings for the subcommand (keys: its long flag names; unknown keys are refused). Command-line flags and `DUET_*` variables override it' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `edge_node=debug`' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l otlp-endpoint -d 'Export traces (a span per generation and per escalation; sampled escalations carry their trace context to the gateway) over OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318. Off by default; the standard OTEL_* variables apply too' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l chat -d 'Wrap the prompt in the model\'s chat template (a user turn, assistant to answer)'
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l truncate -d 'Keep the last tokens of a prompt that does not fit the context instead of refusing it'
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l json -d 'Print one JSON object (text, token ids, stats) instead of streaming text'
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l insecure -d 'Skip TLS verification of the gateway (development only)'
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -l no-presync -d 'Do not send the prompt to the gateway ahead of the first hard token'
complete -c edge-node -n "__fish_edge_node_using_subcommand generate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l model -d 'Model id prepared under $DUET_HOME/models, or a model directory' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l threads -d 'ONNX Runtime intra-op threads (0 = one per core)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l max-context -d 'Largest context (prompt + generated tokens); sizes the KV cache' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l huge-pages -d 'Back the model\'s weights with transparent huge pages once loaded (faster decoding where the kernel allows them); `off` to measure the difference' -r -f -a "on\t''
off\t''"
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l prefill-tokens -d 'Prompt length for the prefill measurement' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l decode-tokens -d 'Decode steps timed at each context length' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l contexts -d 'Context lengths at which decode is timed (comma separated)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l repeat -d 'Repetitions (the median is reported)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l router -d 'Also time a trained router\'s scoring (features + MLP), the per-token work it adds to an SLM step, and report it as a share of the step at the smallest context: `default` (the router shipped for this SLM) or a router file, as `generate --router` takes' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l config -d 'A TOML file of settings for the subcommand (keys: its long flag names; unknown keys are refused). Command-line flags and `DUET_*` variables override it' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `edge_node=debug`' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -l otlp-endpoint -d 'Export traces (a span per generation and per escalation; sampled escalations carry their trace context to the gateway) over OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318. Off by default; the standard OTEL_* variables apply too' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand bench" -s h -l help -d 'Print help'
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l model -d 'Model id prepared under $DUET_HOME/models, or a model directory' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l threads -d 'ONNX Runtime intra-op threads (0 = one per core)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l max-context -d 'Largest context (prompt + generated tokens); sizes the KV cache' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l huge-pages -d 'Back the model\'s weights with transparent huge pages once loaded (faster decoding where the kernel allows them); `off` to measure the difference' -r -f -a "on\t''
off\t''"
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l listen -d 'Address of the HTTP server (loopback by default: apps on this device)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l queue -d 'Requests waiting for the SLM at most; beyond it a request gets 429' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l max-tokens -d '`max_tokens` when a request does not say' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l max-request-tokens -d 'Tokens one request may generate at most, all its choices together (prompts × `n` × `max_tokens`); beyond it a request gets 400. It also bounds one choice, and so how long a request waits behind another\'s' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l max-connections -d 'HTTP connections open at most. At the cap a new one takes the place of the connection waiting longest with no request in progress; when every one has a request in progress, it gets 503 (`Connection: close`)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l header-timeout-ms -d 'A request\'s header must arrive within it (from the accept, or from its first byte on a kept-alive connection), and its body within it again; else the connection is closed' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l idle-timeout-ms -d 'A connection with no request in progress is closed after it (keep-alive), and so is one whose response the client stops reading for that long' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l mode -d 'Routing when a request does not say: `local`, `routed` (needs --gateway) or `cloud`' -r -f -a "local\t'The SLM alone'
routed\t'Hard tokens to the cloud (local when no gateway is configured)'
cloud\t'Every token from the cloud'"
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l gateway -d 'Gateway address (host:port), or several replicas separated by commas (a,b: a random one first, the others on connection loss or GoAway; names are re-resolved on every reconnect, so a DNS name with several records works too); without it generation is local-only' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l tau -d 'Escalate a token when the router\'s confidence is below tau (0 = never, 1 = always). Default: the trained router\'s --escalation-rate default, or 0.5 for `confidence`' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l escalation-rate -d 'Instead of --tau: the share of tokens to escalate, turned into tau by the trained router\'s calibration table. Default 0.1 (the operating point EVALUATION.md reports)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l rate-control -d 'How an escalation rate is held (not --tau, which is always fixed): `carry` steers tau toward the rate from what is actually escalated, carrying what it learned from session to session in this process (the requests of `serve`, the items of an evaluation); `session` starts each session afresh at the calibrated tau; `off` keeps the calibrated tau fixed (docs/ARCHITECTURE.md, "Holding the escalation rate")' -r -f -a "off\t'The calibrated tau, fixed (the realized share drifts with the text)'
session\t'Steered within each session, each starting at the calibrated tau'
carry\t'Steered, and carried across the sessions of this process'"
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l router -d 'Routing policy: `default` (the trained router shipped for this SLM, else `confidence`), `confidence` (the SLM\'s top probability), or a router file from `router-lab train` made for this SLM' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l ca-cert -d 'The gateway\'s certificate (PEM); default: $DUET_HOME/gateway-cert.pem, which a local gateway writes' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l server-name -d 'TLS name of the gateway' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l auth-token -d 'Shared secret the gateway expects (a gateway without mutual TLS: development)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l client-cert -d 'This device\'s certificate (PEM, from `cloud-gateway ca issue`), for a gateway that requires mutual TLS: the gateway knows the device by it' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l client-key -d 'This device\'s private key (PEM), with --client-cert' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l client-cert-poll-ms -d 'How often the --client-cert and --client-key files are checked for a rotated pair, ms (0: never; `serve` also reloads them on SIGHUP). The next connection uses the new pair; the live one keeps its certificate' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l device-id -d 'This device\'s id (default: host name and process id)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l quic-idle-timeout-ms -d 'How long the connection to the gateway may stay silent before it is closed and the link reconnects, ms (keep-alives go every 2 s, so at least 4000). Longer rides out a path that drops packets for a while; shorter notices a gone gateway sooner' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l connect-wait-ms -d 'How long to wait for the first connection before starting (generation never waits later)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l deadline-min-ms -d 'Shortest wait for a cloud token, ms' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l deadline-max-ms -d 'Longest wait for a cloud token, ms: past it the SLM\'s token is used' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l deadline-per-token-ms -d 'Expected LLM time per context token sent, ms, until the gateway\'s answers measure it (lengthens the deadline of long deltas)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l speculate -d 'While a hard token is at the gateway, let the SLM decode up to this many tokens ahead from its own token (kept when the cloud agrees, rolled back when not; the output is the same either way). 0 waits for every answer. 8 by default: on a coding prompt it keeps 0.67x of local-only speed where waiting keeps 0.59x (0.63x and 0.51x at 50 ms RTT); neutral on CommonsenseQA (docs/src/benchmarks/end-to-end.md, "Hiding the network")' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l draft -d 'Send the SLM\'s continuation with each hard token for the LLM to check in the same round trip (protocol v5; several LLM-checked tokens per escalation): off, or adaptive (the draft length follows acceptance and answer time, none while the link is degraded). Gateways older than v5 get plain escalations either way. Off by default until measured (docs/src/benchmarks/draft-verification.md)' -r -f -a "off\t'One token per escalation, as before protocol v5'
adaptive\t'Drafts whose length follows acceptance and the answer time ([`DraftControl`])'"
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l color -d 'Highlight cloud tokens: auto (when stdout is a terminal), always, never (`generate` only: `serve` prints no tokens and refuses it)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l bundle-key -d 'Public key (bundle-signing.pub from `cloud-gateway ca signing-key`) that router bundles must be signed with; without it no bundle is fetched or used' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l bundle-dir -d 'Where the last good bundle is kept (the device starts from it offline); default $DUET_HOME/bundles' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l bundle-poll-ms -d 'How often the device reports its bundle and asks for the rollout\'s, ms (also at once after every reconnect)' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l config -d 'A TOML file of settings for the subcommand (keys: its long flag names; unknown keys are refused). Command-line flags and `DUET_*` variables override it' -r -F
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `edge_node=debug`' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l otlp-endpoint -d 'Export traces (a span per generation and per escalation; sampled escalations carry their trace context to the gateway) over OTLP/HTTP to this collector, e.g. http://127.0.0.1:4318. Off by default; the standard OTEL_* variables apply too' -r
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l insecure -d 'Skip TLS verification of the gateway (development only)'
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -l no-presync -d 'Do not send the prompt to the gateway ahead of the first hard token'
complete -c edge-node -n "__fish_edge_node_using_subcommand serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c edge-node -n "__fish_edge_node_using_subcommand help; and not __fish_seen_subcommand_from generate bench serve help" -f -a "generate" -d 'Generate text for a prompt, streaming tokens to stdout as they are produced'
complete -c edge-node -n "__fish_edge_node_using_subcommand help; and not __fish_seen_subcommand_from generate bench serve help" -f -a "bench" -d 'Measure prefill and decode speed of a model on this machine'
complete -c edge-node -n "__fish_edge_node_using_subcommand help; and not __fish_seen_subcommand_from generate bench serve help" -f -a "serve" -d 'Serve the OpenAI API (chat and text completions, streaming) on a local port for apps on this device, routing hard tokens to the cloud as `generate` does'
complete -c edge-node -n "__fish_edge_node_using_subcommand help; and not __fish_seen_subcommand_from generate bench serve help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
