_cloud__gateway() {
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
                cmd="cloud__gateway"
                ;;
            cloud__gateway,ca)
                cmd="cloud__gateway__subcmd__ca"
                ;;
            cloud__gateway,fleet)
                cmd="cloud__gateway__subcmd__fleet"
                ;;
            cloud__gateway,help)
                cmd="cloud__gateway__subcmd__help"
                ;;
            cloud__gateway__subcmd__ca,help)
                cmd="cloud__gateway__subcmd__ca__subcmd__help"
                ;;
            cloud__gateway__subcmd__ca,init-ca)
                cmd="cloud__gateway__subcmd__ca__subcmd__init__subcmd__ca"
                ;;
            cloud__gateway__subcmd__ca,init-token-secret)
                cmd="cloud__gateway__subcmd__ca__subcmd__init__subcmd__token__subcmd__secret"
                ;;
            cloud__gateway__subcmd__ca,issue)
                cmd="cloud__gateway__subcmd__ca__subcmd__issue"
                ;;
            cloud__gateway__subcmd__ca,issue-token)
                cmd="cloud__gateway__subcmd__ca__subcmd__issue__subcmd__token"
                ;;
            cloud__gateway__subcmd__ca,revoke)
                cmd="cloud__gateway__subcmd__ca__subcmd__revoke"
                ;;
            cloud__gateway__subcmd__ca,signing-key)
                cmd="cloud__gateway__subcmd__ca__subcmd__signing__subcmd__key"
                ;;
            cloud__gateway__subcmd__ca__subcmd__help,help)
                cmd="cloud__gateway__subcmd__ca__subcmd__help__subcmd__help"
                ;;
            cloud__gateway__subcmd__ca__subcmd__help,init-ca)
                cmd="cloud__gateway__subcmd__ca__subcmd__help__subcmd__init__subcmd__ca"
                ;;
            cloud__gateway__subcmd__ca__subcmd__help,init-token-secret)
                cmd="cloud__gateway__subcmd__ca__subcmd__help__subcmd__init__subcmd__token__subcmd__secret"
                ;;
            cloud__gateway__subcmd__ca__subcmd__help,issue)
                cmd="cloud__gateway__subcmd__ca__subcmd__help__subcmd__issue"
                ;;
            cloud__gateway__subcmd__ca__subcmd__help,issue-token)
                cmd="cloud__gateway__subcmd__ca__subcmd__help__subcmd__issue__subcmd__token"
                ;;
            cloud__gateway__subcmd__ca__subcmd__help,revoke)
                cmd="cloud__gateway__subcmd__ca__subcmd__help__subcmd__revoke"
                ;;
            cloud__gateway__subcmd__ca__subcmd__help,signing-key)
                cmd="cloud__gateway__subcmd__ca__subcmd__help__subcmd__signing__subcmd__key"
                ;;
            cloud__gateway__subcmd__fleet,bundle)
                cmd="cloud__gateway__subcmd__fleet__subcmd__bundle"
                ;;
            cloud__gateway__subcmd__fleet,help)
                cmd="cloud__gateway__subcmd__fleet__subcmd__help"
                ;;
            cloud__gateway__subcmd__fleet,publish)
                cmd="cloud__gateway__subcmd__fleet__subcmd__publish"
                ;;
            cloud__gateway__subcmd__fleet,status)
                cmd="cloud__gateway__subcmd__fleet__subcmd__status"
                ;;
            cloud__gateway__subcmd__fleet__subcmd__help,bundle)
                cmd="cloud__gateway__subcmd__fleet__subcmd__help__subcmd__bundle"
                ;;
            cloud__gateway__subcmd__fleet__subcmd__help,help)
                cmd="cloud__gateway__subcmd__fleet__subcmd__help__subcmd__help"
                ;;
            cloud__gateway__subcmd__fleet__subcmd__help,publish)
                cmd="cloud__gateway__subcmd__fleet__subcmd__help__subcmd__publish"
                ;;
            cloud__gateway__subcmd__fleet__subcmd__help,status)
                cmd="cloud__gateway__subcmd__fleet__subcmd__help__subcmd__status"
                ;;
            cloud__gateway__subcmd__help,ca)
                cmd="cloud__gateway__subcmd__help__subcmd__ca"
                ;;
            cloud__gateway__subcmd__help,fleet)
                cmd="cloud__gateway__subcmd__help__subcmd__fleet"
                ;;
            cloud__gateway__subcmd__help,help)
                cmd="cloud__gateway__subcmd__help__subcmd__help"
                ;;
            cloud__gateway__subcmd__help__subcmd__ca,init-ca)
                cmd="cloud__gateway__subcmd__help__subcmd__ca__subcmd__init__subcmd__ca"
                ;;
            cloud__gateway__subcmd__help__subcmd__ca,init-token-secret)
                cmd="cloud__gateway__subcmd__help__subcmd__ca__subcmd__init__subcmd__token__subcmd__secret"
                ;;
            cloud__gateway__subcmd__help__subcmd__ca,issue)
                cmd="cloud__gateway__subcmd__help__subcmd__ca__subcmd__issue"
                ;;
            cloud__gateway__subcmd__help__subcmd__ca,issue-token)
                cmd="cloud__gateway__subcmd__help__subcmd__ca__subcmd__issue__subcmd__token"
                ;;
            cloud__gateway__subcmd__help__subcmd__ca,revoke)
                cmd="cloud__gateway__subcmd__help__subcmd__ca__subcmd__revoke"
                ;;
            cloud__gateway__subcmd__help__subcmd__ca,signing-key)
                cmd="cloud__gateway__subcmd__help__subcmd__ca__subcmd__signing__subcmd__key"
                ;;
            cloud__gateway__subcmd__help__subcmd__fleet,bundle)
                cmd="cloud__gateway__subcmd__help__subcmd__fleet__subcmd__bundle"
                ;;
            cloud__gateway__subcmd__help__subcmd__fleet,publish)
                cmd="cloud__gateway__subcmd__help__subcmd__fleet__subcmd__publish"
                ;;
            cloud__gateway__subcmd__help__subcmd__fleet,status)
                cmd="cloud__gateway__subcmd__help__subcmd__fleet__subcmd__status"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        cloud__gateway)
            opts="-h -V --config --check --listen --http-listen --tls-cert --tls-key --write-cert --max-frame-bytes --max-connections --gateway-id --auth-token --client-ca --device-token-secret --insecure-unverified-devices --revoked-file --revoked-poll-ms --client-crl --device-rate-limit --device-rate-burst --max-sessions-per-device --session-idle-secs --model --threads --max-context --kv-cache-sessions --backend-delay-ms --backend-token-delay-us --backend-draft-token-delay-us --record-answers --replay-answers --max-batch --max-wait-ms --queue-capacity --max-batch-tokens --ready-saturated-ms --ready-stalled-ms --max-sessions --max-connections-per-source --stream-read-timeout-ms --max-buffered-bytes-per-connection --max-buffered-bytes --fair-share --draft-verify --engine --engine-tokenizer --engine-startup-secs --engine-resolve-interval-ms --engine-routing --engine-max-in-flight --engine-admission --fair-line --engine-max-attempts --engine-breaker-failures --engine-breaker-open-ms --engine-health-interval-ms --drain-grace-secs --drain-redirect --admin-token --bundle-store --bundle-poll-ms --operator-token-file --log --otlp-endpoint --help --version ca fleet help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --config)
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
                --tls-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --write-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-frame-bytes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-connections)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gateway-id)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --auth-token)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-ca)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device-token-secret)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --revoked-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --revoked-poll-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-crl)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device-rate-limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device-rate-burst)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-sessions-per-device)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --session-idle-secs)
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
                --max-context)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kv-cache-sessions)
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
                --backend-draft-token-delay-us)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --record-answers)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --replay-answers)
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
                --max-batch-tokens)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ready-saturated-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ready-stalled-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-sessions)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-connections-per-source)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stream-read-timeout-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-buffered-bytes-per-connection)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-buffered-bytes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fair-share)
                    COMPREPLY=($(compgen -W "device off" -- "${cur}"))
                    return 0
                    ;;
                --draft-verify)
                    COMPREPLY=($(compgen -W "whole by-load" -- "${cur}"))
                    return 0
                    ;;
                --engine)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine-tokenizer)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine-startup-secs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine-resolve-interval-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine-routing)
                    COMPREPLY=($(compgen -W "sticky round-robin" -- "${cur}"))
                    return 0
                    ;;
                --engine-max-in-flight)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine-admission)
                    COMPREPLY=($(compgen -W "cost off" -- "${cur}"))
                    return 0
                    ;;
                --fair-line)
                    COMPREPLY=($(compgen -W "on off" -- "${cur}"))
                    return 0
                    ;;
                --engine-max-attempts)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine-breaker-failures)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine-breaker-open-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --engine-health-interval-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --drain-grace-secs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --drain-redirect)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --admin-token)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --bundle-store)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --bundle-poll-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --operator-token-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --otlp-endpoint)
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
        cloud__subcmd__gateway__subcmd__ca)
            opts="-h --help init-ca issue init-token-secret issue-token signing-key revoke help"
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__help)
            opts="init-ca issue init-token-secret issue-token signing-key revoke help"
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__help__subcmd__init__subcmd__ca)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__help__subcmd__init__subcmd__token__subcmd__secret)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__help__subcmd__issue)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__help__subcmd__issue__subcmd__token)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__help__subcmd__revoke)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__help__subcmd__signing__subcmd__key)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__init__subcmd__ca)
            opts="-h --dir --name --days --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --days)
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__init__subcmd__token__subcmd__secret)
            opts="-h --out --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --out)
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__issue)
            opts="-h --ca-dir --device --days --out --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --ca-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --days)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__issue__subcmd__token)
            opts="-h --secret --device --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --secret)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device)
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__revoke)
            opts="-h --revoked-file --crl --ca-dir --reason --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --revoked-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --crl)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ca-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --reason)
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
        cloud__subcmd__gateway__subcmd__ca__subcmd__signing__subcmd__key)
            opts="-h --dir --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --dir)
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
        cloud__subcmd__gateway__subcmd__fleet)
            opts="-h --help bundle publish status help"
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
        cloud__subcmd__gateway__subcmd__fleet__subcmd__bundle)
            opts="-h --router --version --signing-key --out --slm --tokenizer-fingerprint --escalation-rate --tau --deadline-min-ms --deadline-max-ms --speculate --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --router)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --version)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --signing-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --out)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --slm)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tokenizer-fingerprint)
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
                --deadline-min-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --deadline-max-ms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --speculate)
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
        cloud__subcmd__gateway__subcmd__fleet__subcmd__help)
            opts="bundle publish status help"
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
        cloud__subcmd__gateway__subcmd__fleet__subcmd__help__subcmd__bundle)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__fleet__subcmd__help__subcmd__help)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__fleet__subcmd__help__subcmd__publish)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__fleet__subcmd__help__subcmd__status)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__fleet__subcmd__publish)
            opts="-h --bundle-store --to --bundle-key --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --bundle-store)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --to)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --bundle-key)
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
        cloud__subcmd__gateway__subcmd__fleet__subcmd__status)
            opts="-h --bundle-store --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --bundle-store)
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
        cloud__subcmd__gateway__subcmd__help)
            opts="ca fleet help"
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
        cloud__subcmd__gateway__subcmd__help__subcmd__ca)
            opts="init-ca issue init-token-secret issue-token signing-key revoke"
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
        cloud__subcmd__gateway__subcmd__help__subcmd__ca__subcmd__init__subcmd__ca)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__help__subcmd__ca__subcmd__init__subcmd__token__subcmd__secret)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__help__subcmd__ca__subcmd__issue)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__help__subcmd__ca__subcmd__issue__subcmd__token)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__help__subcmd__ca__subcmd__revoke)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__help__subcmd__ca__subcmd__signing__subcmd__key)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__help__subcmd__fleet)
            opts="bundle publish status"
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
        cloud__subcmd__gateway__subcmd__help__subcmd__fleet__subcmd__bundle)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__help__subcmd__fleet__subcmd__publish)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__help__subcmd__fleet__subcmd__status)
            opts=""
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 4 ]] ; then
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
        cloud__subcmd__gateway__subcmd__help__subcmd__help)
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
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _cloud__gateway -o nosort -o bashdefault -o default cloud-gateway
else
    complete -F _cloud__gateway -o bashdefault -o default cloud-gateway
fi
