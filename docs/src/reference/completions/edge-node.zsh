#compdef edge-node

autoload -U is-at-least

_edge-node() {
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
'--config=[A TOML file of settings for the subcommand (keys\: its long flag names; unknown keys are refused). Command-line flags and \`DUET_*\` variables override it]:CONFIG:_files' \
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`edge_node=debug\`]:LOG:_default' \
'--otlp-endpoint=[Export traces (a span per generation and per escalation; sampled escalations carry their trace context to the gateway) over OTLP/HTTP to this collector, e.g. http\://127.0.0.1\:4318. Off by default; the standard OTEL_* variables apply too]:OTLP_ENDPOINT:_default' \
'-h[Print help]' \
'--help[Print help]' \
'-V[Print version]' \
'--version[Print version]' \
":: :_edge-node_commands" \
"*::: :->edge-node" \
&& ret=0
    case $state in
    (edge-node)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:edge-node-command-$line[1]:"
        case $line[1] in
            (generate)
_arguments "${_arguments_options[@]}" : \
'--model=[Model id prepared under \$DUET_HOME/models, or a model directory]:MODEL:_default' \
'--threads=[ONNX Runtime intra-op threads (0 = one per core)]:THREADS:_default' \
'--max-context=[Largest context (prompt + generated tokens); sizes the KV cache]:MAX_CONTEXT:_default' \
'--huge-pages=[Back the model'\''s weights with transparent huge pages once loaded (faster decoding where the kernel allows them); \`off\` to measure the difference]:HUGE_PAGES:(on off)' \
'--prompt=[The prompt text]:PROMPT:_default' \
'--system=[System prompt for --chat (default\: the model'\''s own)]:SYSTEM:_default' \
'--max-new-tokens=[Most tokens to generate]:MAX_NEW_TOKENS:_default' \
'--temperature=[Sampling temperature; 0 = greedy]:TEMPERATURE:_default' \
'--top-k=[Sample only among the k most likely tokens (0 = all)]:TOP_K:_default' \
'--top-p=[Nucleus sampling mass (1.0 = off)]:TOP_P:_default' \
'--seed=[Seed for reproducible sampling]:SEED:_default' \
'--gateway=[Gateway address (host\:port), or several replicas separated by commas (a,b\: a random one first, the others on connection loss or GoAway; names are re-resolved on every reconnect, so a DNS name with several records works too); without it generation is local-only]:GATEWAY:_default' \
'--tau=[Escalate a token when the router'\''s confidence is below tau (0 = never, 1 = always). Default\: the trained router'\''s --escalation-rate default, or 0.5 for \`confidence\`]:TAU:_default' \
'(--tau)--escalation-rate=[Instead of --tau\: the share of tokens to escalate, turned into tau by the trained router'\''s calibration table. Default 0.1 (the operating point EVALUATION.md reports)]:ESCALATION_RATE:_default' \
'--rate-control=[How an escalation rate is held (not --tau, which is always fixed)\: \`carry\` steers tau toward the rate from what is actually escalated, carrying what it learned from session to session in this process (the requests of \`serve\`, the items of an evaluation); \`session\` starts each session afresh at the calibrated tau; \`off\` keeps the calibrated tau fixed (docs/ARCHITECTURE.md, "Holding the escalation rate")]:RATE_CONTROL:((off\:"The calibrated tau, fixed (the realized share drifts with the text)"
session\:"Steered within each session, each starting at the calibrated tau"
carry\:"Steered, and carried across the sessions of this process"))' \
'--router=[Routing policy\: \`default\` (the trained router shipped for this SLM, else \`confidence\`), \`confidence\` (the SLM'\''s top probability), or a router file from \`router-lab train\` made for this SLM]:ROUTER:_default' \
'--ca-cert=[The gateway'\''s certificate (PEM); default\: \$DUET_HOME/gateway-cert.pem, which a local gateway writes]:CA_CERT:_files' \
'--server-name=[TLS name of the gateway]:SERVER_NAME:_default' \
'--auth-token=[Shared secret the gateway expects (a gateway without mutual TLS\: development)]:AUTH_TOKEN:_default' \
'--client-cert=[This device'\''s certificate (PEM, from \`cloud-gateway ca issue\`), for a gateway that requires mutual TLS\: the gateway knows the device by it]:CLIENT_CERT:_files' \
'--client-key=[This device'\''s private key (PEM), with --client-cert]:CLIENT_KEY:_files' \
'--client-cert-poll-ms=[How often the --client-cert and --client-key files are checked for a rotated pair, ms (0\: never; \`serve\` also reloads them on SIGHUP). The next connection uses the new pair; the live one keeps its certificate]:CLIENT_CERT_POLL_MS:_default' \
'--device-id=[This device'\''s id (default\: host name and process id)]:DEVICE_ID:_default' \
'--quic-idle-timeout-ms=[How long the connection to the gateway may stay silent before it is closed and the link reconnects, ms (keep-alives go every 2 s, so at least 4000). Longer rides out a path that drops packets for a while; shorter notices a gone gateway sooner]:QUIC_IDLE_TIMEOUT_MS:_default' \
'--connect-wait-ms=[How long to wait for the first connection before starting (generation never waits later)]:CONNECT_WAIT_MS:_default' \
'--deadline-min-ms=[Shortest wait for a cloud token, ms]:DEADLINE_MIN_MS:_default' \
'--deadline-max-ms=[Longest wait for a cloud token, ms\: past it the SLM'\''s token is used]:DEADLINE_MAX_MS:_default' \
'--deadline-per-token-ms=[Expected LLM time per context token sent, ms, until the gateway'\''s answers measure it (lengthens the deadline of long deltas)]:DEADLINE_PER_TOKEN_MS:_default' \
'--speculate=[While a hard token is at the gateway, let the SLM decode up to this many tokens ahead from its own token (kept when the cloud agrees, rolled back when not; the output is the same either way). 0 waits for every answer. 8 by default\: on a coding prompt it keeps 0.67x of local-only speed where waiting keeps 0.59x (0.63x and 0.51x at 50 ms RTT); neutral on CommonsenseQA (docs/src/benchmarks/end-to-end.md, "Hiding the network")]:SPECULATE:_default' \
'--draft=[Send the SLM'\''s continuation with each hard token for the LLM to check in the same round trip (protocol v5; several LLM-checked tokens per escalation)\: off, or adaptive (the draft length follows acceptance and answer time, none while the link is degraded). Gateways older than v5 get plain escalations either way. Off by default until measured (docs/src/benchmarks/draft-verification.md)]:DRAFT:((off\:"One token per escalation, as before protocol v5"
adaptive\:"Drafts whose length follows acceptance and the answer time (\[\`DraftControl\`\])"))' \
'--color=[Highlight cloud tokens\: auto (when stdout is a terminal), always, never (\`generate\` only\: \`serve\` prints no tokens and refuses it)]:COLOR:(auto always never)' \
'--config=[A TOML file of settings for the subcommand (keys\: its long flag names; unknown keys are refused). Command-line flags and \`DUET_*\` variables override it]:CONFIG:_files' \
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`edge_node=debug\`]:LOG:_default' \
'--otlp-endpoint=[Export traces (a span per generation and per escalation; sampled escalations carry their trace context to the gateway) over OTLP/HTTP to this collector, e.g. http\://127.0.0.1\:4318. Off by default; the standard OTEL_* variables apply too]:OTLP_ENDPOINT:_default' \
'--chat[Wrap the prompt in the model'\''s chat template (a user turn, assistant to answer)]' \
'--truncate[Keep the last tokens of a prompt that does not fit the context instead of refusing it]' \
'--json[Print one JSON object (text, token ids, stats) instead of streaming text]' \
'--insecure[Skip TLS verification of the gateway (development only)]' \
'--no-presync[Do not send the prompt to the gateway ahead of the first hard token]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(bench)
_arguments "${_arguments_options[@]}" : \
'--model=[Model id prepared under \$DUET_HOME/models, or a model directory]:MODEL:_default' \
'--threads=[ONNX Runtime intra-op threads (0 = one per core)]:THREADS:_default' \
'--max-context=[Largest context (prompt + generated tokens); sizes the KV cache]:MAX_CONTEXT:_default' \
'--huge-pages=[Back the model'\''s weights with transparent huge pages once loaded (faster decoding where the kernel allows them); \`off\` to measure the difference]:HUGE_PAGES:(on off)' \
'--prefill-tokens=[Prompt length for the prefill measurement]:PREFILL_TOKENS:_default' \
'--decode-tokens=[Decode steps timed at each context length]:DECODE_TOKENS:_default' \
'*--contexts=[Context lengths at which decode is timed (comma separated)]:CONTEXTS:_default' \
'--repeat=[Repetitions (the median is reported)]:REPEAT:_default' \
'--router=[Also time a trained router'\''s scoring (features + MLP), the per-token work it adds to an SLM step, and report it as a share of the step at the smallest context\: \`default\` (the router shipped for this SLM) or a router file, as \`generate --router\` takes]:ROUTER:_default' \
'--config=[A TOML file of settings for the subcommand (keys\: its long flag names; unknown keys are refused). Command-line flags and \`DUET_*\` variables override it]:CONFIG:_files' \
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`edge_node=debug\`]:LOG:_default' \
'--otlp-endpoint=[Export traces (a span per generation and per escalation; sampled escalations carry their trace context to the gateway) over OTLP/HTTP to this collector, e.g. http\://127.0.0.1\:4318. Off by default; the standard OTEL_* variables apply too]:OTLP_ENDPOINT:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(serve)
_arguments "${_arguments_options[@]}" : \
'--model=[Model id prepared under \$DUET_HOME/models, or a model directory]:MODEL:_default' \
'--threads=[ONNX Runtime intra-op threads (0 = one per core)]:THREADS:_default' \
'--max-context=[Largest context (prompt + generated tokens); sizes the KV cache]:MAX_CONTEXT:_default' \
'--huge-pages=[Back the model'\''s weights with transparent huge pages once loaded (faster decoding where the kernel allows them); \`off\` to measure the difference]:HUGE_PAGES:(on off)' \
'--listen=[Address of the HTTP server (loopback by default\: apps on this device)]:LISTEN:_default' \
'--queue=[Requests waiting for the SLM at most; beyond it a request gets 429]:QUEUE:_default' \
'--max-tokens=[\`max_tokens\` when a request does not say]:MAX_TOKENS:_default' \
'--max-request-tokens=[Tokens one request may generate at most, all its choices together (prompts × \`n\` × \`max_tokens\`); beyond it a request gets 400. It also bounds one choice, and so how long a request waits behind another'\''s]:MAX_REQUEST_TOKENS:_default' \
'--max-connections=[HTTP connections open at most. At the cap a new one takes the place of the connection waiting longest with no request in progress; when every one has a request in progress, it gets 503 (\`Connection\: close\`)]:MAX_CONNECTIONS:_default' \
'--header-timeout-ms=[A request'\''s header must arrive within it (from the accept, or from its first byte on a kept-alive connection), and its body within it again; else the connection is closed]:HEADER_TIMEOUT_MS:_default' \
'--idle-timeout-ms=[A connection with no request in progress is closed after it (keep-alive), and so is one whose response the client stops reading for that long]:IDLE_TIMEOUT_MS:_default' \
'--mode=[Routing when a request does not say\: \`local\`, \`routed\` (needs --gateway) or \`cloud\`]:MODE:((local\:"The SLM alone"
routed\:"Hard tokens to the cloud (local when no gateway is configured)"
cloud\:"Every token from the cloud"))' \
'--gateway=[Gateway address (host\:port), or several replicas separated by commas (a,b\: a random one first, the others on connection loss or GoAway; names are re-resolved on every reconnect, so a DNS name with several records works too); without it generation is local-only]:GATEWAY:_default' \
'--tau=[Escalate a token when the router'\''s confidence is below tau (0 = never, 1 = always). Default\: the trained router'\''s --escalation-rate default, or 0.5 for \`confidence\`]:TAU:_default' \
'(--tau)--escalation-rate=[Instead of --tau\: the share of tokens to escalate, turned into tau by the trained router'\''s calibration table. Default 0.1 (the operating point EVALUATION.md reports)]:ESCALATION_RATE:_default' \
'--rate-control=[How an escalation rate is held (not --tau, which is always fixed)\: \`carry\` steers tau toward the rate from what is actually escalated, carrying what it learned from session to session in this process (the requests of \`serve\`, the items of an evaluation); \`session\` starts each session afresh at the calibrated tau; \`off\` keeps the calibrated tau fixed (docs/ARCHITECTURE.md, "Holding the escalation rate")]:RATE_CONTROL:((off\:"The calibrated tau, fixed (the realized share drifts with the text)"
session\:"Steered within each session, each starting at the calibrated tau"
carry\:"Steered, and carried across the sessions of this process"))' \
'--router=[Routing policy\: \`default\` (the trained router shipped for this SLM, else \`confidence\`), \`confidence\` (the SLM'\''s top probability), or a router file from \`router-lab train\` made for this SLM]:ROUTER:_default' \
'--ca-cert=[The gateway'\''s certificate (PEM); default\: \$DUET_HOME/gateway-cert.pem, which a local gateway writes]:CA_CERT:_files' \
'--server-name=[TLS name of the gateway]:SERVER_NAME:_default' \
'--auth-token=[Shared secret the gateway expects (a gateway without mutual TLS\: development)]:AUTH_TOKEN:_default' \
'--client-cert=[This device'\''s certificate (PEM, from \`cloud-gateway ca issue\`), for a gateway that requires mutual TLS\: the gateway knows the device by it]:CLIENT_CERT:_files' \
'--client-key=[This device'\''s private key (PEM), with --client-cert]:CLIENT_KEY:_files' \
'--client-cert-poll-ms=[How often the --client-cert and --client-key files are checked for a rotated pair, ms (0\: never; \`serve\` also reloads them on SIGHUP). The next connection uses the new pair; the live one keeps its certificate]:CLIENT_CERT_POLL_MS:_default' \
'--device-id=[This device'\''s id (default\: host name and process id)]:DEVICE_ID:_default' \
'--quic-idle-timeout-ms=[How long the connection to the gateway may stay silent before it is closed and the link reconnects, ms (keep-alives go every 2 s, so at least 4000). Longer rides out a path that drops packets for a while; shorter notices a gone gateway sooner]:QUIC_IDLE_TIMEOUT_MS:_default' \
'--connect-wait-ms=[How long to wait for the first connection before starting (generation never waits later)]:CONNECT_WAIT_MS:_default' \
'--deadline-min-ms=[Shortest wait for a cloud token, ms]:DEADLINE_MIN_MS:_default' \
'--deadline-max-ms=[Longest wait for a cloud token, ms\: past it the SLM'\''s token is used]:DEADLINE_MAX_MS:_default' \
'--deadline-per-token-ms=[Expected LLM time per context token sent, ms, until the gateway'\''s answers measure it (lengthens the deadline of long deltas)]:DEADLINE_PER_TOKEN_MS:_default' \
'--speculate=[While a hard token is at the gateway, let the SLM decode up to this many tokens ahead from its own token (kept when the cloud agrees, rolled back when not; the output is the same either way). 0 waits for every answer. 8 by default\: on a coding prompt it keeps 0.67x of local-only speed where waiting keeps 0.59x (0.63x and 0.51x at 50 ms RTT); neutral on CommonsenseQA (docs/src/benchmarks/end-to-end.md, "Hiding the network")]:SPECULATE:_default' \
'--draft=[Send the SLM'\''s continuation with each hard token for the LLM to check in the same round trip (protocol v5; several LLM-checked tokens per escalation)\: off, or adaptive (the draft length follows acceptance and answer time, none while the link is degraded). Gateways older than v5 get plain escalations either way. Off by default until measured (docs/src/benchmarks/draft-verification.md)]:DRAFT:((off\:"One token per escalation, as before protocol v5"
adaptive\:"Drafts whose length follows acceptance and the answer time (\[\`DraftControl\`\])"))' \
'--color=[Highlight cloud tokens\: auto (when stdout is a terminal), always, never (\`generate\` only\: \`serve\` prints no tokens and refuses it)]:COLOR:(auto always never)' \
'--bundle-key=[Public key (bundle-signing.pub from \`cloud-gateway ca signing-key\`) that router bundles must be signed with; without it no bundle is fetched or used]:BUNDLE_KEY:_files' \
'--bundle-dir=[Where the last good bundle is kept (the device starts from it offline); default \$DUET_HOME/bundles]:BUNDLE_DIR:_files' \
'--bundle-poll-ms=[How often the device reports its bundle and asks for the rollout'\''s, ms (also at once after every reconnect)]:BUNDLE_POLL_MS:_default' \
'--config=[A TOML file of settings for the subcommand (keys\: its long flag names; unknown keys are refused). Command-line flags and \`DUET_*\` variables override it]:CONFIG:_files' \
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`edge_node=debug\`]:LOG:_default' \
'--otlp-endpoint=[Export traces (a span per generation and per escalation; sampled escalations carry their trace context to the gateway) over OTLP/HTTP to this collector, e.g. http\://127.0.0.1\:4318. Off by default; the standard OTEL_* variables apply too]:OTLP_ENDPOINT:_default' \
'--insecure[Skip TLS verification of the gateway (development only)]' \
'--no-presync[Do not send the prompt to the gateway ahead of the first hard token]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_edge-node__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:edge-node-help-command-$line[1]:"
        case $line[1] in
            (generate)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(bench)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(serve)
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

(( $+functions[_edge-node_commands] )) ||
_edge-node_commands() {
    local commands; commands=(
'generate:Generate text for a prompt, streaming tokens to stdout as they are produced' \
'bench:Measure prefill and decode speed of a model on this machine' \
'serve:Serve the OpenAI API (chat and text completions, streaming) on a local port for apps on this device, routing hard tokens to the cloud as \`generate\` does' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'edge-node commands' commands "$@"
}
(( $+functions[_edge-node__subcmd__bench_commands] )) ||
_edge-node__subcmd__bench_commands() {
    local commands; commands=()
    _describe -t commands 'edge-node bench commands' commands "$@"
}
(( $+functions[_edge-node__subcmd__generate_commands] )) ||
_edge-node__subcmd__generate_commands() {
    local commands; commands=()
    _describe -t commands 'edge-node generate commands' commands "$@"
}
(( $+functions[_edge-node__subcmd__help_commands] )) ||
_edge-node__subcmd__help_commands() {
    local commands; commands=(
'generate:Generate text for a prompt, streaming tokens to stdout as they are produced' \
'bench:Measure prefill and decode speed of a model on this machine' \
'serve:Serve the OpenAI API (chat and text completions, streaming) on a local port for apps on this device, routing hard tokens to the cloud as \`generate\` does' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'edge-node help commands' commands "$@"
}
(( $+functions[_edge-node__subcmd__help__subcmd__bench_commands] )) ||
_edge-node__subcmd__help__subcmd__bench_commands() {
    local commands; commands=()
    _describe -t commands 'edge-node help bench commands' commands "$@"
}
(( $+functions[_edge-node__subcmd__help__subcmd__generate_commands] )) ||
_edge-node__subcmd__help__subcmd__generate_commands() {
    local commands; commands=()
    _describe -t commands 'edge-node help generate commands' commands "$@"
}
(( $+functions[_edge-node__subcmd__help__subcmd__help_commands] )) ||
_edge-node__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'edge-node help help commands' commands "$@"
}
(( $+functions[_edge-node__subcmd__help__subcmd__serve_commands] )) ||
_edge-node__subcmd__help__subcmd__serve_commands() {
    local commands; commands=()
    _describe -t commands 'edge-node help serve commands' commands "$@"
}
(( $+functions[_edge-node__subcmd__serve_commands] )) ||
_edge-node__subcmd__serve_commands() {
    local commands; commands=()
    _describe -t commands 'edge-node serve commands' commands "$@"
}

if [ "$funcstack[1]" = "_edge-node" ]; then
    _edge-node "$@"
else
    compdef _edge-node edge-node
fi
