#!/usr/bin/env python3
"""Read rendered Kubernetes manifests (`kubectl kustomize k8s/overlays/X` on stdin) for the
checks and the local stand-in of the cluster. Needs PyYAML (deploy/k8s/check's venv).

  gateway-toml                 print the gateway.toml of the duet-gateway-config ConfigMap
  schema-docs OUT              write the documents kubernetes-validate has schemas for to OUT;
                               print one line per CRD document it skips (and why)
  consistency HELP [LLAMA_HELP]
                               fail unless the manifests agree with the gateway binary (its
                               --help) and with each other: see check_consistency
  adapter-query [--metric M] NS POD...
                               an HPA metric's PromQL as prometheus-adapter renders it for POD...
                               (default: the first adapter rule's, the in-flight count)
  adapter-metrics              the custom metrics the adapter rules serve, one a line
  enrolment                    fail unless cert-manager's device enrolment (k8s/enrolment/
                               cert-manager) issues client certificates the gateway accepts
  shipped-configs FILE...      fail if a gateway.toml relies on a shared device token
                               (auth-token); note those that listen beyond loopback without
                               client-ca (the gateway refuses to start with them)
  prom-vector LABEL...         a Prometheus query answer (stdin) as one line
  local-identity ROOT          the DUET_* variables that give a local gateway process the
                               identity files (client-ca, client-crl, revoked-file) where the pod
                               mounts them: ROOT/<Secret or ConfigMap name>/<file>; fails
                               without client-ca
  local-prometheus SPEC        a Prometheus config scraping local processes as the
                               ServiceMonitors would scrape the pods (SPEC below)

Only the Python standard library and PyYAML: the checks run before anything else is installed.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "k8s/monitoring/duet.rules.yml"
ADAPTER = ROOT / "k8s/monitoring/prometheus-adapter-values.yaml"
GATEWAY_IMAGE = "duet/cloud-gateway"
# Read by the binary but not a flag (where models and ONNX Runtime are looked for).
GATEWAY_ENV_NOT_FLAGS = {"DUET_HOME"}
CRD_GROUPS = ("monitoring.coreos.com/", "cert-manager.io/")


def docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(sys.stdin) if d]


def by_kind(items: list[dict], kind: str) -> list[dict]:
    return [d for d in items if d.get("kind") == kind]


def gateway_toml(items: list[dict]) -> str:
    maps = [d for d in by_kind(items, "ConfigMap") if d["metadata"]["name"].startswith("duet-gateway-config")]
    if len(maps) != 1 or "gateway.toml" not in maps[0].get("data", {}):
        sys.exit("expected one duet-gateway-config ConfigMap holding gateway.toml")
    return maps[0]["data"]["gateway.toml"]


def settings(cfg: dict) -> dict:
    """gateway.toml's keys with its sections ([transport], [engines], ...) flattened: each key
    is a flag's long name; the binary's --check says which section a key belongs in."""
    flat: dict = {}
    for key, value in cfg.items():
        flat.update(value if isinstance(value, dict) else {key: value})
    return flat


def pod_specs(items: list[dict]):
    """(workload, pod spec) for every Deployment, StatefulSet and Job."""
    for d in items:
        if d.get("kind") in ("Deployment", "StatefulSet", "Job"):
            yield d, d["spec"]["template"]["spec"]


def containers(spec: dict):
    yield from spec.get("initContainers", [])
    yield from spec.get("containers", [])


def image_name(image: str) -> str:
    return image.split("@")[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image.split("@")[0]


def help_flags_and_env(help_text: str) -> tuple[set[str], set[str]]:
    flags = set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9-]+)", help_text, re.M))
    env = set(re.findall(r"\[env: (DUET_[A-Z0-9_]+)", help_text))
    return flags, env


def check_consistency(items: list[dict], help_text: str, llama_help: str | None) -> list[str]:
    errors: list[str] = []
    flags, env = help_flags_and_env(help_text)
    if not flags or not env:
        return ["could not read flags and DUET_* variables from the gateway's --help"]

    # 1. The gateway containers use only flags and DUET_* variables the binary has.
    for workload, spec in pod_specs(items):
        for c in containers(spec):
            if image_name(c["image"]) != GATEWAY_IMAGE:
                continue
            where = f"{workload['kind']}/{workload['metadata']['name']} container {c['name']}"
            for a in c.get("args", []) + c.get("command", []):
                if a.startswith("--") and a.split("=")[0] not in flags:
                    errors.append(f"{where}: flag {a.split('=')[0]} is not a cloud-gateway flag")
            for e in c.get("env", []):
                n = e["name"]
                if n.startswith("DUET_") and n not in env and n not in GATEWAY_ENV_NOT_FLAGS:
                    errors.append(f"{where}: {n} is not a cloud-gateway variable (cloud-gateway --help)")

    # 2. gateway.toml: sections of flags (the binary's --check also refuses unknown sections and
    #    keys by name; this names the overlay). Engines: see check_engines.
    sectioned = tomllib.loads(gateway_toml(items))
    for key, value in sectioned.items():
        if not isinstance(value, dict):
            errors.append(f"gateway.toml: `{key}` outside a section (deprecated: put it in its section of `cloud-gateway --help`)")
    cfg = settings(sectioned)
    for key in cfg:
        if f"--{key}" not in flags:
            errors.append(f"gateway.toml: `{key}` is not a cloud-gateway flag")
    engines = cfg.get("engine", [])
    services = {s["metadata"]["name"]: s for s in by_kind(items, "Service")}
    errors += check_engines(items, engines, services)
    errors += check_drain(items, cfg)
    errors += check_identity(items, cfg)

    # 3. The model the gateway reads first is the one its init container waits for, and the
    #    models Job prepares it.
    want_model = cfg.get("engine-tokenizer", cfg.get("model")) if engines else cfg.get("model")
    want_file = "tokenizer.json" if engines else "duet-model.json"
    steps = {"qwen2.5-coder-0.5b-instruct": "slm", "qwen2.5-coder-1.5b-instruct": "llm"}
    for workload, spec in pod_specs(items):
        for c in containers(spec):
            for e in c.get("env", []):
                if e["name"] == "MODEL_FILE" and e.get("value") != f"/var/lib/duet/models/{want_model}/{want_file}":
                    errors.append(f"{workload['metadata']['name']}/{c['name']}: MODEL_FILE {e.get('value')} but gateway.toml needs {want_model}/{want_file}")
                if e["name"] == "PREPARE_STEPS" and want_model in steps and steps[want_model] not in e["value"].split():
                    errors.append(f"Job/{workload['metadata']['name']}: PREPARE_STEPS `{e['value']}` does not prepare {want_model} ({steps[want_model]})")

    # 4. ServiceMonitors select a Service here and name one of its ports.
    for sm in by_kind(items, "ServiceMonitor"):
        sel = sm["spec"]["selector"]["matchLabels"]
        hits = [s for s in services.values() if sel.items() <= s["metadata"].get("labels", {}).items()]
        if not hits:
            errors.append(f"ServiceMonitor/{sm['metadata']['name']}: selector {sel} matches no Service")
        for ep in sm["spec"]["endpoints"]:
            if hits and not any(ep["port"] == p.get("name") for s in hits for p in s["spec"]["ports"]):
                errors.append(f"ServiceMonitor/{sm['metadata']['name']}: port {ep['port']} is not a port of {[s['metadata']['name'] for s in hits]}")

    # 5. The PrometheusRule carries exactly k8s/monitoring/duet.rules.yml, and the HPA's custom
    #    metric is what the adapter serves from a recorded series.
    rules = yaml.safe_load(RULES.read_text())
    for pr in by_kind(items, "PrometheusRule"):
        if pr["spec"] != rules:
            errors.append(f"PrometheusRule/{pr['metadata']['name']} differs from {RULES.relative_to(ROOT)}")
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    adapter = yaml.safe_load(ADAPTER.read_text())["rules"]["custom"]
    served = {}
    for rule in adapter:
        series = re.match(r"[^{]+", rule["seriesQuery"]).group(0)
        if series not in recorded:
            errors.append(f"adapter rule reads {series}, which no recording rule writes")
        served[rule["name"]["as"]] = rule
    for hpa in by_kind(items, "HorizontalPodAutoscaler"):
        for m in hpa["spec"]["metrics"]:
            if m["type"] == "Pods" and m["pods"]["metric"]["name"] not in served:
                errors.append(f"HPA/{hpa['metadata']['name']}: metric {m['pods']['metric']['name']} is not served by the adapter rules")

    # 6. llama-server flags exist in the engine binary (when it is built here).
    if llama_help is not None:
        for workload, spec in pod_specs(items):
            for c in spec.get("containers", []):
                if image_name(c["image"]) == "duet/llama-server":
                    for a in c.get("args", []):
                        if a.startswith("--") and not re.search(rf"(^|[\s,]){re.escape(a)}([\s,=]|$)", llama_help, re.M):
                            errors.append(f"{workload['metadata']['name']}/{c['name']}: {a} is not a llama-server flag")
    return errors


# The engine image each `engine` kind runs in (an entry must name a Service whose pods run it).
ENGINE_IMAGES = {"llamacpp": "duet/llama-server", "sglang": "lmsysorg/sglang", "vllm": "vllm/vllm-openai"}


def workloads(items: list[dict]):
    """Deployments and StatefulSets."""
    return [d for d in items if d.get("kind") in ("Deployment", "StatefulSet")]


def check_engines(items: list[dict], engines: list[str], services: dict) -> list[str]:
    """Every engine workload is reached through its headless Service's name with `dns+` (one
    gateway worker per pod, pods added and drained as the name's answer changes), and every
    `engine` entry names such a Service, at its port, whose pods run that kind's image.
    Per-pod names (`http://POD.SERVICE:PORT`, the form before discovery) are refused: scaling
    would need a config change and a gateway roll, and a pod missing at start-up stopped the
    gateway."""
    errors: list[str] = []
    listed: dict[str, str] = {}
    for e in engines:
        m = re.fullmatch(r"(\w[\w.-]*)=(dns\+)?(https?)://([^/:]+)(?::(\d+))?/?", e)
        if not m:
            errors.append(f"gateway.toml: engine `{e}` is not KIND=[dns+]URL")
            continue
        kind, dns, scheme, host, port = m.groups()
        port = int(port or (443 if scheme == "https" else 80))
        labels = host.split(".")
        name = labels[0]
        svc = services.get(name)
        if svc is None and len(labels) > 1 and labels[1] in services:
            errors.append(f"gateway.toml: engine `{e}` names one pod of Service/{labels[1]}; write {kind}=dns+{scheme}://{labels[1]}:{port} (every pod, scaled freely)")
            continue
        if svc is None:
            errors.append(f"gateway.toml: engine `{e}` names no Service of these manifests ({sorted(services)})")
            continue
        spec = svc["spec"]
        if spec.get("clusterIP") != "None":
            errors.append(f"gateway.toml: engine `{e}`: Service/{name} is not headless (its name would be one virtual IP, one worker)")
        if not dns:
            errors.append(f"gateway.toml: engine `{e}` is one worker; write {kind}=dns+{scheme}://{host}:{port} so that every pod of Service/{name} is its own worker")
        if port not in [p["port"] for p in spec.get("ports", [])]:
            errors.append(f"gateway.toml: engine `{e}`: port {port} is not a port of Service/{name} ({[p['port'] for p in spec.get('ports', [])]})")
        if spec.get("publishNotReadyAddresses"):
            errors.append(f"Service/{name}: publishNotReadyAddresses must be false: a discovered engine pod should join when ready and leave the answer when it terminates")
        sel = spec.get("selector", {})
        pods = [w for w in workloads(items) if sel and sel.items() <= w["spec"]["template"]["metadata"].get("labels", {}).items()]
        if not pods:
            errors.append(f"Service/{name}: its selector {sel} matches no Deployment or StatefulSet")
        want = ENGINE_IMAGES.get(kind.lower().replace("llama.cpp", "llamacpp"))
        for w in pods:
            images = {image_name(c["image"]) for c in w["spec"]["template"]["spec"].get("containers", [])}
            if want and want not in images:
                errors.append(f"gateway.toml: engine `{e}` is {kind}, but {w['kind']}/{w['metadata']['name']} behind Service/{name} runs {sorted(images)}")
        listed[name] = e
    # Every engine workload is reached by some entry.
    for w in workloads(items):
        images = {image_name(c["image"]) for c in w["spec"]["template"]["spec"].get("containers", [])}
        if not images & set(ENGINE_IMAGES.values()):
            continue
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        behind = [n for n, s in services.items() if s["spec"].get("selector") and s["spec"]["selector"].items() <= labels.items()]
        if not any(n in listed for n in behind):
            errors.append(f"{w['kind']}/{w['metadata']['name']} runs an engine that no gateway.toml engine entry reaches (Services {behind})")
    return errors


def check_drain(items: list[dict], cfg: dict) -> list[str]:
    """The gateway pod's terminationGracePeriodSeconds covers its preStop sleep, the drain's
    grace (drain-grace-secs) and 5 s of margin; otherwise the kubelet kills a draining gateway
    with answers still in flight."""
    errors: list[str] = []
    if "drain-grace-secs" not in cfg:
        errors.append("gateway.toml: set drain-grace-secs (the pod's terminationGracePeriodSeconds is sized from it)")
        return errors
    grace = int(cfg["drain-grace-secs"])
    for workload, spec in pod_specs(items):
        for c in spec.get("containers", []):
            if image_name(c["image"]) != GATEWAY_IMAGE:
                continue
            cmd = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
            pre = int(cmd[-1]) if len(cmd) >= 2 and cmd[0].endswith("sleep") else 0
            term = spec.get("terminationGracePeriodSeconds", 30)
            if term < pre + grace + 5:
                errors.append(f"{workload['kind']}/{workload['metadata']['name']}: terminationGracePeriodSeconds {term} < preStop {pre} + drain-grace-secs {grace} + 5")
    return errors


def gateway_containers(items: list[dict]):
    """(workload, pod spec, container) for every container running the gateway's image."""
    for workload, spec in pod_specs(items):
        for c in spec.get("containers", []):
            if image_name(c["image"]) == GATEWAY_IMAGE:
                yield workload, spec, c


def mounted_file(spec: dict, container: dict, path: str) -> tuple[dict, dict] | None:
    """The (volumeMount, volume) that `path` in `container` lies in, if any (the deepest)."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    best = None
    for m in container.get("volumeMounts", []):
        root = m["mountPath"].rstrip("/") + "/"
        if (path == m["mountPath"] or path.startswith(root)) and (best is None or len(root) > len(best[0]["mountPath"].rstrip("/") + "/")):
            best = (m, volumes.get(m["name"], {}))
    return best


def check_identity(items: list[dict], cfg: dict) -> list[str]:
    """Devices are verified by certificate, never by a shared token: gateway.toml sets
    `client-ca` (a gateway listening beyond loopback refuses to start without it) and no
    `auth-token`; no gateway container gets DUET_AUTH_TOKEN or a Secret key named auth-token;
    the CA certificate is a file of a mounted Secret or ConfigMap that carries nothing else (the
    CA's key never goes into the cluster); the CRLs and the deny list are files of a ConfigMap
    or Secret mounted as a folder (a subPath mount never sees the operator's update, so a
    revocation would never arrive)."""
    errors: list[str] = []
    if "auth-token" in cfg:
        errors.append("gateway.toml: auth-token is a shared device token (any holder may claim any device id): devices authenticate with certificates (client-ca)")
    if cfg.get("insecure-unverified-devices"):
        errors.append("gateway.toml: insecure-unverified-devices lets any device act as any other: devices authenticate with certificates (client-ca)")
    ca = cfg.get("client-ca")
    if not ca:
        errors.append("gateway.toml: no client-ca: devices would be unverified (whatever their Hello claims); a gateway listening beyond loopback refuses to start without it")
    crls = cfg.get("client-crl", [])
    crls = [crls] if isinstance(crls, str) else list(crls)
    revoked = [cfg["revoked-file"]] if cfg.get("revoked-file") else []
    for d in items:
        if d.get("kind") == "Secret" and "auth-token" in {**d.get("data", {}), **d.get("stringData", {})}:
            errors.append(f"Secret/{d['metadata']['name']}: an auth-token key (a shared device token) is shipped")
    for workload, spec, c in gateway_containers(items):
        where = f"{workload['kind']}/{workload['metadata']['name']} container {c['name']}"
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef", {})
            if e["name"] == "DUET_AUTH_TOKEN" or ref.get("key") == "auth-token":
                errors.append(f"{where}: {e['name']} gives the gateway a shared device token; devices authenticate with certificates (client-ca)")
        if c.get("envFrom"):
            errors.append(f"{where}: envFrom would let a Secret or ConfigMap set any DUET_* variable (DUET_AUTH_TOKEN too): name each variable")
        if ca:
            hit = mounted_file(spec, c, ca)
            source = hit and (hit[1].get("secret") or hit[1].get("configMap"))
            if not hit or not source:
                errors.append(f"{where}: client-ca {ca} is in no mounted Secret or ConfigMap (the fleet CA's certificate)")
            else:
                name = ca[len(hit[0]["mountPath"].rstrip("/")) + 1:]
                items_ = source.get("items")
                if hit[0].get("subPath"):
                    errors.append(f"{where}: client-ca {ca} comes through a subPath mount (a renewed CA certificate would never arrive)")
                if items_ is None or [i["path"] for i in items_] != [name]:
                    errors.append(f"{where}: volume {hit[0]['name']} must mount only {name} (items), so that a CA key put in the same object never reaches the pod")
                if source.get("optional"):
                    errors.append(f"{where}: volume {hit[0]['name']} (client-ca) is optional: a pod without the fleet CA must not start")
        for kind, files in (("client-crl", crls), ("revoked-file", revoked)):
            for f in files:
                hit = mounted_file(spec, c, f)
                if not hit or not (hit[1].get("configMap") or hit[1].get("secret")):
                    errors.append(f"{where}: {kind} {f} is in no mounted ConfigMap or Secret (the operator's revocations)")
                elif hit[0].get("subPath"):
                    errors.append(f"{where}: {kind} {f} comes through a subPath mount: the kubelet never updates those, so a revocation would never reach the gateway")
    return errors


IDENTITY_FILES = (("client-ca", "DUET_CLIENT_CA"), ("client-crl", "DUET_CLIENT_CRL"), ("revoked-file", "DUET_REVOKED_FILE"))


def local_identity(items: list[dict], root: str) -> list[str]:
    """`VAR=PATH` for each identity file of gateway.toml, PATH being where a local stand-in
    keeps the file of the Secret or ConfigMap the gateway pod mounts it from:
    ROOT/<object name>/<path inside the mount>."""
    cfg = settings(tomllib.loads(gateway_toml(items)))
    if not cfg.get("client-ca"):
        sys.exit("gateway.toml sets no client-ca: the overlay verifies no device")
    _, spec, c = next(gateway_containers(items))
    out = []
    for key, var in IDENTITY_FILES:
        files = cfg.get(key) or []
        local = []
        for f in [files] if isinstance(files, str) else files:
            hit = mounted_file(spec, c, f)
            source = hit and (hit[1].get("secret") or hit[1].get("configMap"))
            if not source:
                sys.exit(f"gateway.toml's {key} {f} is in no mounted Secret or ConfigMap")
            name = source.get("secretName") or source.get("name")
            local.append(f"{root}/{name}/{f[len(hit[0]['mountPath'].rstrip('/')) + 1:]}")
        if local:
            out.append(f"{var}={','.join(local)}")
    return out


def shipped_configs(paths: list[str]) -> tuple[list[str], list[str]]:
    """(errors, notes) over gateway.toml files: a shared device token (auth-token) is an
    error; listening beyond loopback without client-ca is a note (the gateway refuses to start
    with such a file unless it says insecure-unverified-devices)."""
    errors, notes = [], []
    for p in paths:
        cfg = settings(tomllib.loads(Path(p).read_text()))
        if "auth-token" in cfg:
            errors.append(f"{p}: auth-token (a shared device token) is set")
        listen = str(cfg.get("listen", "127.0.0.1:4433"))
        host = listen.rsplit(":", 1)[0].strip("[]")
        loopback = host in ("localhost", "::1") or host.startswith("127.")
        verified = cfg.get("client-ca") or cfg.get("device-token-secret")
        if not loopback and not verified and not cfg.get("insecure-unverified-devices"):
            notes.append(f"{p}: listens on {listen} without client-ca or device-token-secret (the gateway refuses to start with it)")
        if cfg.get("insecure-unverified-devices"):
            notes.append(f"{p}: insecure-unverified-devices: any device may act as any other")
    return errors, notes


# What the gateway takes as a device id (common::device_id and the deny list's serial prefix).
DEVICE_ID_MAX_BYTES = 128
SERIAL_PREFIX = "serial:"


# The fields of cert-manager's v1 API that its CRDs accept where the enrolment uses them
# (kubernetes-validate has no schema for them): a misspelt field would otherwise be dropped
# by the API server without a word (a renewBefore never applied).
CERT_MANAGER_FIELDS = {
    "Certificate.spec": {"secretName", "commonName", "duration", "renewBefore", "renewBeforePercentage", "usages", "privateKey", "issuerRef",
                         "dnsNames", "uris", "emailAddresses", "ipAddresses", "otherNames", "subject", "literalSubject", "isCA",
                         "secretTemplate", "revisionHistoryLimit", "keystores", "additionalOutputFormats", "nameConstraints", "encodeUsagesInRequest"},
    "Certificate.spec.privateKey": {"algorithm", "size", "encoding", "rotationPolicy"},
    "Certificate.spec.issuerRef": {"name", "kind", "group"},
    "Issuer.spec": {"ca", "selfSigned", "acme", "vault", "venafi"},
    "Issuer.spec.ca": {"secretName", "crlDistributionPoints", "ocspServers", "issuingCertificateURLs"},
}
CERT_MANAGER_USAGES = {"signing", "digital signature", "content commitment", "key encipherment", "key agreement", "data encipherment",
                       "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth", "client auth", "code signing",
                       "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
                       "microsoft sgc", "netscape sgc"}


def unknown_fields(kind: str, name: str, spec: dict) -> list[str]:
    """Fields of a cert-manager object outside CERT_MANAGER_FIELDS."""
    errors = []
    for where, allowed in CERT_MANAGER_FIELDS.items():
        obj_kind, *path = where.split(".")
        if obj_kind != kind:
            continue
        node = {"spec": spec}
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        for field in sorted(set(node or {}) - allowed):
            errors.append(f"{kind}/{name}: unknown field {where.split('.', 1)[1]}.{field} (cert-manager v1)")
    return errors


def check_enrolment(items: list[dict]) -> list[str]:
    """cert-manager's device enrolment issues what the gateway accepts: every Certificate is
    signed by an Issuer of these manifests that is a CA issuer, names its device in commonName
    (a valid device id: the gateway reads nothing else), is for TLS client authentication and
    not a server or a CA, with an ECDSA P-256 key as `cloud-gateway ca issue` makes; and the
    CA's key stays out of the gateways' namespace."""
    errors: list[str] = []
    issuers = {d["metadata"]["name"]: d for d in by_kind(items, "Issuer")}
    certs = by_kind(items, "Certificate")
    if not certs:
        errors.append("no Certificate: the example device is missing")
    for name, issuer in issuers.items():
        errors += unknown_fields("Issuer", name, issuer.get("spec", {}))
        if "ca" not in issuer.get("spec", {}) or not issuer["spec"]["ca"].get("secretName"):
            errors.append(f"Issuer/{name}: not a CA issuer with a secretName (the fleet CA's certificate and key)")
        if issuer["metadata"].get("namespace") == "duet":
            errors.append(f"Issuer/{name}: in namespace duet, the gateways': the fleet CA's key would sit beside them")
    for c in certs:
        n, spec = c["metadata"]["name"], c.get("spec", {})
        errors += unknown_fields("Certificate", n, spec)
        for u in sorted(set(spec.get("usages", [])) - CERT_MANAGER_USAGES):
            errors.append(f"Certificate/{n}: `{u}` is not a cert-manager key usage")
        ref = spec.get("issuerRef", {})
        if ref.get("kind", "Issuer") != "Issuer" or ref.get("name") not in issuers:
            errors.append(f"Certificate/{n}: issuerRef {ref} is not an Issuer of these manifests ({sorted(issuers)})")
        cn = spec.get("commonName", "")
        if not cn or len(cn.encode()) > DEVICE_ID_MAX_BYTES or any(ord(ch) < 0x20 or ord(ch) == 0x7f for ch in cn) or cn.startswith(SERIAL_PREFIX) or cn.strip() != cn:
            errors.append(f"Certificate/{n}: commonName {cn!r} is not a device id (1-{DEVICE_ID_MAX_BYTES} bytes, no control characters or padding, not `{SERIAL_PREFIX}...`)")
        usages = set(spec.get("usages", []))
        if "client auth" not in usages or {"server auth", "cert sign", "crl sign"} & usages:
            errors.append(f"Certificate/{n}: usages {sorted(usages)} must include `client auth` and no server or CA usage")
        if spec.get("isCA"):
            errors.append(f"Certificate/{n}: isCA: a device certificate must not sign others")
        key = spec.get("privateKey", {})
        if (key.get("algorithm"), int(key.get("size", 0))) != ("ECDSA", 256):
            errors.append(f"Certificate/{n}: privateKey {key} is not ECDSA P-256")
        if not spec.get("secretName"):
            errors.append(f"Certificate/{n}: no secretName")
    return errors


def adapter_metrics() -> list[str]:
    """The custom metrics the adapter rules serve, in their order."""
    return [r["name"]["as"] for r in yaml.safe_load(ADAPTER.read_text())["rules"]["custom"]]


def adapter_query(namespace: str, pods: list[str], metric: str | None = None) -> str:
    """metricsQuery as prometheus-adapter fills it for GET .../namespaces/NS/pods/*/METRIC
    (default: the first rule's metric)."""
    rules = yaml.safe_load(ADAPTER.read_text())["rules"]["custom"]
    rule = next((r for r in rules if metric in (None, r["name"]["as"])), None)
    if rule is None:
        raise SystemExit(f"no adapter rule serves {metric}")
    series = re.match(r"[^{]+", rule["seriesQuery"]).group(0)
    matchers = f'namespace="{namespace}",pod=~"{"|".join(pods)}"'
    return rule["metricsQuery"].replace("<<.Series>>", series).replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", "pod")


def local_prometheus(items: list[dict], spec: dict) -> dict:
    """A Prometheus config for local processes standing in for pods. SPEC (JSON):
    {"namespace": "duet", "rules": PATH, "interval": "5s",
     "services": {SERVICE: [[POD, "host:port"], ...]}}: each ServiceMonitor endpoint of a listed
    Service becomes a job named after the Service (as the operator names it), one target per
    pod, labelled namespace/pod/service, scraped at the endpoint's path."""
    services = {s["metadata"]["name"]: s for s in by_kind(items, "Service")}
    jobs = []
    for sm in by_kind(items, "ServiceMonitor"):
        sel = sm["spec"]["selector"]["matchLabels"]
        for name, svc in services.items():
            if name not in spec["services"] or not sel.items() <= svc["metadata"].get("labels", {}).items():
                continue
            for ep in sm["spec"]["endpoints"]:
                jobs.append({
                    "job_name": name,
                    "metrics_path": ep.get("path", "/metrics"),
                    "scrape_interval": spec.get("interval", ep.get("interval", "15s")),
                    "scrape_timeout": "2s",
                    "static_configs": [
                        {"targets": [addr], "labels": {"namespace": spec["namespace"], "pod": pod, "service": name}}
                        for pod, addr in spec["services"][name]
                    ],
                })
    return {
        "global": {"scrape_interval": spec.get("interval", "15s"), "evaluation_interval": spec.get("interval", "15s")},
        "rule_files": [spec["rules"]],
        "scrape_configs": jobs,
    }


def prom_vector(labels: list[str]) -> str:
    """A Prometheus /api/v1/query answer (stdin) as `label/label=value, ...`."""
    result = json.load(sys.stdin)["data"]["result"]
    rows = sorted("/".join(s["metric"].get(l, "?") for l in labels) + "=" + s["value"][1] for s in result)
    return ", ".join(rows) or "(no series yet)"


def main() -> int:
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "prom-vector":
        print(prom_vector(args))
        return 0
    if cmd == "adapter-query":
        metric = None
        if args and args[0] == "--metric":
            metric, args = args[1], args[2:]
        print(adapter_query(args[0], args[1:], metric))
        return 0
    if cmd == "adapter-metrics":
        print("\n".join(adapter_metrics()))
        return 0
    if cmd == "shipped-configs":
        errors, notes = shipped_configs(args)
        for e in errors:
            print(f"FAIL {e}")
        for n in notes:
            print(f"NOTE {n}")
        return 1 if errors else 0
    items = docs()
    if cmd == "gateway-toml":
        sys.stdout.write(gateway_toml(items))
    elif cmd == "schema-docs":
        keep = []
        for d in items:
            if d["apiVersion"].startswith(CRD_GROUPS):
                print(f"skipped {d['kind']}/{d['metadata']['name']} ({d['apiVersion']}: a CRD kubernetes-validate has no schema for; checked below by the consistency rules)")
            else:
                keep.append(d)
        Path(args[0]).write_text(yaml.safe_dump_all(keep, sort_keys=False))
    elif cmd == "consistency":
        llama = Path(args[1]).read_text() if len(args) > 1 and args[1] else None
        errors = check_consistency(items, Path(args[0]).read_text(), llama)
        for e in errors:
            print(f"FAIL {e}")
        return 1 if errors else 0
    elif cmd == "local-identity":
        print("\n".join(local_identity(items, args[0])))
    elif cmd == "enrolment":
        errors = check_enrolment(items)
        for e in errors:
            print(f"FAIL {e}")
        return 1 if errors else 0
    elif cmd == "local-prometheus":
        print(yaml.safe_dump(local_prometheus(items, json.loads(args[0])), sort_keys=False))
    else:
        sys.exit(f"unknown command {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
