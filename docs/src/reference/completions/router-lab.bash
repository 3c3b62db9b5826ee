_router__lab() {
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
                cmd="router__lab"
                ;;
            router__lab,check-served)
                cmd="router__lab__subcmd__check__subcmd__served"
                ;;
            router__lab,compare-teachers)
                cmd="router__lab__subcmd__compare__subcmd__teachers"
                ;;
            router__lab,curves)
                cmd="router__lab__subcmd__curves"
                ;;
            router__lab,eval-cqa)
                cmd="router__lab__subcmd__eval__subcmd__cqa"
                ;;
            router__lab,help)
                cmd="router__lab__subcmd__help"
                ;;
            router__lab,labels)
                cmd="router__lab__subcmd__labels"
                ;;
            router__lab,pool)
                cmd="router__lab__subcmd__pool"
                ;;
            router__lab,train)
                cmd="router__lab__subcmd__train"
                ;;
            router__lab__subcmd__help,check-served)
                cmd="router__lab__subcmd__help__subcmd__check__subcmd__served"
                ;;
            router__lab__subcmd__help,compare-teachers)
                cmd="router__lab__subcmd__help__subcmd__compare__subcmd__teachers"
                ;;
            router__lab__subcmd__help,curves)
                cmd="router__lab__subcmd__help__subcmd__curves"
                ;;
            router__lab__subcmd__help,eval-cqa)
                cmd="router__lab__subcmd__help__subcmd__eval__subcmd__cqa"
                ;;
            router__lab__subcmd__help,help)
                cmd="router__lab__subcmd__help__subcmd__help"
                ;;
            router__lab__subcmd__help,labels)
                cmd="router__lab__subcmd__help__subcmd__labels"
                ;;
            router__lab__subcmd__help,pool)
                cmd="router__lab__subcmd__help__subcmd__pool"
                ;;
            router__lab__subcmd__help,train)
                cmd="router__lab__subcmd__help__subcmd__train"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        router__lab)
            opts="-h -V --log --help --version labels train pool eval-cqa compare-teachers check-served curves help"
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
        router__subcmd__lab__subcmd__check__subcmd__served)
            opts="-h --run --llm --slm --threads --limit --tie-nats --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --run)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --llm)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --slm)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tie-nats)
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
        router__subcmd__lab__subcmd__compare__subcmd__teachers)
            opts="-h --llm --llm-engine --threads --data --offset --limit --batch --out --choices --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --llm)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --llm-engine)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --offset)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --batch)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --choices)
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
        router__subcmd__lab__subcmd__curves)
            opts="-h --items --title --out --with --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --items)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --title)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --with)
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
        router__subcmd__lab__subcmd__eval__subcmd__cqa)
            opts="-h --slm --llm --threads --llm-engine --task --eval-python --data --limit --policies --rates --max-new-tokens --out --reuse --gateway --tau --escalation-rate --rate-control --router --ca-cert --insecure --server-name --auth-token --client-cert --client-key --client-cert-poll-ms --device-id --quic-idle-timeout-ms --connect-wait-ms --deadline-min-ms --deadline-max-ms --deadline-per-token-ms --no-presync --speculate --draft --color --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --slm)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --llm)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --llm-engine)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --task)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --eval-python)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --policies)
                    COMPREPLY=($(compgen -W "slm-only llm-only random confidence router" -- "${cur}"))
                    return 0
                    ;;
                --rates)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-new-tokens)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --reuse)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tau)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --escalation-rate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --rate-control)
                    COMPREPLY=($(compgen -W "off session carry" -- "${cur}"))
                    return 0
                    ;;
                --router)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ca-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --server-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --auth-token)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-cert-poll-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device-id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --quic-idle-timeout-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --connect-wait-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
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
                --speculate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --draft)
                    COMPREPLY=($(compgen -W "off adaptive" -- "${cur}"))
                    return 0
                    ;;
                --color)
                    COMPREPLY=($(compgen -W "auto always never" -- "${cur}"))
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
        router__subcmd__lab__subcmd__help)
            opts="labels train pool eval-cqa compare-teachers check-served curves help"
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
        router__subcmd__lab__subcmd__help__subcmd__check__subcmd__served)
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
        router__subcmd__lab__subcmd__help__subcmd__compare__subcmd__teachers)
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
        router__subcmd__lab__subcmd__help__subcmd__curves)
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
        router__subcmd__lab__subcmd__help__subcmd__eval__subcmd__cqa)
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
        router__subcmd__lab__subcmd__help__subcmd__help)
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
        router__subcmd__lab__subcmd__help__subcmd__labels)
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
        router__subcmd__lab__subcmd__help__subcmd__pool)
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
        router__subcmd__lab__subcmd__help__subcmd__train)
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
        router__subcmd__lab__subcmd__labels)
            opts="-h --slm --llm --threads --llm-engine --data --limit --out --offset --on-policy --task --batch --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --slm)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --llm)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --threads)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --llm-engine)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --offset)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --task)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --batch)
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
        router__subcmd__lab__subcmd__pool)
            opts="-h --router --router-weight --out --calibration-items --calibration-data --calibration-tasks --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --router)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --router-weight)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --calibration-items)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --calibration-data)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --calibration-tasks)
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
        router__subcmd__lab__subcmd__train)
            opts="-h --labels --on-policy-labels --on-policy-weight --out --hidden --epochs --lr --weight-decay --dropout --holdout-pct --calibration-items --calibration-data --calibration-tasks --seed --log --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --labels)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --on-policy-labels)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --on-policy-weight)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --hidden)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --epochs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --lr)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --weight-decay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --dropout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --holdout-pct)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --calibration-items)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --calibration-data)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --calibration-tasks)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --seed)
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
    complete -F _router__lab -o nosort -o bashdefault -o default router-lab
else
    complete -F _router__lab -o bashdefault -o default router-lab
fi
