_loadtest() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="loadtest"
                ;;
            loadtest,abuse)
                cmd="loadtest__subcmd__abuse"
                ;;
            loadtest,batching)
                cmd="loadtest__subcmd__batching"
                ;;
            loadtest,capacity)
                cmd="loadtest__subcmd__capacity"
                ;;
            loadtest,engines)
                cmd="loadtest__subcmd__engines"
                ;;
            loadtest,fleet)
                cmd="loadtest__subcmd__fleet"
                ;;
            loadtest,gateway)
                cmd="loadtest__subcmd__gateway"
                ;;
            loadtest,gateway-latency)
                cmd="loadtest__subcmd__gateway__subcmd__latency"
                ;;
            loadtest,handshake)
                cmd="loadtest__subcmd__handshake"
                ;;
            loadtest,help)
                cmd="loadtest__subcmd__help"
                ;;
            loadtest,relay)
                cmd="loadtest__subcmd__relay"
                ;;
            loadtest__subcmd__help,abuse)
                cmd="loadtest__subcmd__help__subcmd__abuse"
                ;;
            loadtest__subcmd__help,batching)
                cmd="loadtest__subcmd__help__subcmd__batching"
                ;;
            loadtest__subcmd__help,capacity)
                cmd="loadtest__subcmd__help__subcmd__capacity"
                ;;
            loadtest__subcmd__help,engines)
                cmd="loadtest__subcmd__help__subcmd__engines"
                ;;
            loadtest__subcmd__help,fleet)
                cmd="loadtest__subcmd__help__subcmd__fleet"
                ;;
            loadtest__subcmd__help,gateway)
                cmd="loadtest__subcmd__help__subcmd__gateway"
                ;;
            loadtest__subcmd__help,gateway-latency)
                cmd="loadtest__subcmd__help__subcmd__gateway__subcmd__latency"
                ;;
            loadtest__subcmd__help,handshake)
                cmd="loadtest__subcmd__help__subcmd__handshake"
                ;;
            loadtest__subcmd__help,help)
                cmd="loadtest__subcmd__help__subcmd__help"
                ;;
            loadtest__subcmd__help,relay)
                cmd="loadtest__subcmd__help__subcmd__relay"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        loadtest)
            opts="-h -V --log --help --version batching gateway-latency engines relay fleet capacity handshake gateway abuse help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__abuse)
            opts="-h --gateway-bin --model --backend-delay-ms --backend-token-delay-us --scenario-secs --probe-deadline-ms --scenarios --fair-behaved-load --engine --gateway-arg --gateway-log --gateway-log-file --out --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --gateway-bin)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --model)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backend-delay-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backend-token-delay-us)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --scenario-secs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --probe-deadline-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --scenarios)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fair-behaved-load)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway-arg)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway-log-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__batching)
            opts="-h --model --batches --context --deltas --steps --threads --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --model)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --batches)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --context)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --deltas)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --steps)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__capacity)
            opts="-h --rows --served-at-least --itl-p99-ms --min-escalations --max-devices --precision --out --devices --ramp-up-s --duration-s --sessions --think-time-s --mix --escalation-rate --tau --seed --profiles --profiles-file --gateway --ca-cert --gateway-metrics --gateway-pid --backend --trace --listen --http-listen --cert-dir --max-batch --max-wait-ms --queue-capacity --max-connections --llm-threads --client-ca --draft-verify --deadline-min-ms --deadline-max-ms --deadline-per-token-ms --no-presync --draft --ping-interval-s --baseline-devices --connect-timeout-s --progress-s --json --html --label --device-prefix --fleet-ca-dir --client-cert-dir --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --rows)
                    COMPREPLY=($(compgen -W "one-token draft draft-by-load" -- "${cur}"))
                    return 0
                    ;;
                --served-at-least)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --itl-p99-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --min-escalations)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-devices)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --precision)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --devices)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ramp-up-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --duration-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --sessions)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --think-time-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --escalation-rate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tau)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --seed)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profiles)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profiles-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ca-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway-metrics)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway-pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backend)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --http-listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cert-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-batch)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-wait-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --queue-capacity)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-connections)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --llm-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-ca)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --draft-verify)
                    COMPREPLY=($(compgen -W "whole by-load" -- "${cur}"))
                    return 0
                    ;;
                --deadline-min-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --deadline-max-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --deadline-per-token-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --draft)
                    COMPREPLY=($(compgen -W "off adaptive" -- "${cur}"))
                    return 0
                    ;;
                --ping-interval-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --baseline-devices)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --connect-timeout-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --progress-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --html)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --label)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fleet-ca-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-cert-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__engines)
            opts="-h --engine --sessions --escalations --prompt-tokens --delta --routing --direct --seed --json --sessions-per-device --deadline-ms --max-in-flight --max-attempts --health-timeout-ms --tokenizer --model --threads --max-batch --label --engine-admission --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --engine)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --sessions)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --escalations)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --prompt-tokens)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --delta)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --routing)
                    COMPREPLY=($(compgen -W "sticky round-robin" -- "${cur}"))
                    return 0
                    ;;
                --seed)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --sessions-per-device)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --deadline-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-in-flight)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-attempts)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --health-timeout-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tokenizer)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --model)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-batch)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --label)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine-admission)
                    COMPREPLY=($(compgen -W "cost off" -- "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__fleet)
            opts="-h --devices --ramp-up-s --duration-s --sessions --think-time-s --mix --escalation-rate --tau --seed --profiles --profiles-file --gateway --ca-cert --gateway-metrics --gateway-pid --backend --trace --listen --http-listen --cert-dir --max-batch --max-wait-ms --queue-capacity --max-connections --llm-threads --client-ca --draft-verify --deadline-min-ms --deadline-max-ms --deadline-per-token-ms --no-presync --draft --ping-interval-s --baseline-devices --connect-timeout-s --progress-s --json --html --label --device-prefix --fleet-ca-dir --client-cert-dir --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --devices)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ramp-up-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --duration-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --sessions)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --think-time-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --mix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --escalation-rate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tau)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --seed)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profiles)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profiles-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ca-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway-metrics)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway-pid)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --backend)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --http-listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cert-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-batch)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-wait-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --queue-capacity)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-connections)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --llm-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-ca)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --draft-verify)
                    COMPREPLY=($(compgen -W "whole by-load" -- "${cur}"))
                    return 0
                    ;;
                --deadline-min-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --deadline-max-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --deadline-per-token-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --draft)
                    COMPREPLY=($(compgen -W "off adaptive" -- "${cur}"))
                    return 0
                    ;;
                --ping-interval-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --baseline-devices)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --connect-timeout-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --progress-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --html)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --label)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device-prefix)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fleet-ca-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-cert-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__gateway)
            opts="-h --backend --trace --listen --http-listen --cert-dir --max-batch --max-wait-ms --queue-capacity --max-connections --llm-threads --client-ca --draft-verify --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --backend)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --http-listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cert-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-batch)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-wait-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --queue-capacity)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-connections)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --llm-threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-ca)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --draft-verify)
                    COMPREPLY=($(compgen -W "whole by-load" -- "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__gateway__subcmd__latency)
            opts="-h --devices --sessions --escalations --cost-ms --max-batch --max-wait-ms --max-batch-tokens --fair-share --delta --trace-sample --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --devices)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --sessions)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --escalations)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cost-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-batch)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-wait-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-batch-tokens)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fair-share)
                    COMPREPLY=($(compgen -W "device off" -- "${cur}"))
                    return 0
                    ;;
                --delta)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trace-sample)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__handshake)
            opts="-h --connections --concurrency --rounds --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --connections)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --concurrency)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --rounds)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help)
            opts="batching gateway-latency engines relay fleet capacity handshake gateway abuse help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help__subcmd__abuse)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help__subcmd__batching)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help__subcmd__capacity)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help__subcmd__engines)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help__subcmd__fleet)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help__subcmd__gateway)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help__subcmd__gateway__subcmd__latency)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help__subcmd__handshake)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__help__subcmd__relay)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        loadtest__subcmd__relay)
            opts="-h --profile --listen --upstream --profiles-file --seed --stats-every-s --duration-s --max-clients --idle-timeout-s --list --bench --bench-clients --bench-rounds --bench-bytes --bench-interval-ms --bench-repeats --json --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --profile)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --upstream)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --profiles-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --seed)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stats-every-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --duration-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-clients)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --idle-timeout-s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --bench-clients)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --bench-rounds)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --bench-bytes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --bench-interval-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --bench-repeats)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _loadtest -o nosort -o bashdefault -o default loadtest
else
    complete -F _loadtest -o bashdefault -o default loadtest
fi
