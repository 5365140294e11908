#!/usr/bin/env python3
"""Renders the Helm chart deploy/helm/compute-market offline and validates what it renders; run
by scripts/chart-check, which makes the venv this needs (helm-python-sdk, kubernetes-validate,
jsonschema, PyYAML).

Usage: chart_check.py [-v] [-f VALUES.yaml ...] [--release NAME] [--namespace NS]

Without -f, every values file deploy/helm/values/*.yaml must be accepted (below), and the broken
ones refused. With -f, only the values given are checked, merged in order as `helm install -f
A -f B` merges them (later files win), in one row; they must be accepted. --release and
--namespace (default cm and compute-market) name the release the accepted values are rendered
as; the broken files and mutations are always rendered as cm in compute-market.

For every values file deploy/helm/values/*.yaml (or the -f values), which must be accepted:
- the values (merged over the chart's defaults) against values.schema.json, by jsonschema
  (draft-07, every error with its path) and by Helm's own schema check;
- `helm lint --strict` at Kubernetes KUBE (Helm's Go SDK, in process: helm-python-sdk binds
  libhelm_c, a C ABI over Helm v4's SDK, through ctypes; no helm binary, no cluster);
- the render (release RELEASE in namespace NAMESPACE); NOTES.txt must render;
- each rendered object: Kubernetes kinds by kubernetes-validate in strict mode (unknown fields
  are errors) against Kubernetes KUBE; the CRD kinds (ServiceMonitor, ScaledObject, RayService)
  by jsonschema against deploy/crds/*.json; a kind with neither schema is an error;
- lint-level rules on each object (names, labels, images, resources, security) and the chart's
  own invariants (grace periods from the market's windows, one key per pod, each verifier a
  StatefulSet of exactly 1 replica (OrderedReady, RollingUpdate, its store on a PVC from
  volumeClaimTemplates, retained; never a Deployment, never an emptyDir store) with a Service
  that publishes not-ready addresses, StatefulSet names within 52 characters, every key Secret
  mounted for one role only, the Ray pods' NetworkPolicies (Ray's ports from this release's
  pods and the KubeRay operator only, the provider's HTTP port from all), a KEDA minimum of at
  least 1, public URLs within the 56 bytes a node announces, with providers.perPodServices one
  ClusterIP Service per provider ordinal selecting that pod only and publishing it while not
  ready, the `-cuda` image on GPU providers only, the verifiers' cranking and sizing flags,
  selectors that select something (a StatefulSet's pods counted with the pod-name label its
  controller adds), NOTES.txt naming store.publicUrl when set, no Secret and no key material
  in the output).

Each deploy/helm/values/broken/*.yaml must be refused (by the schema, the templates or the
validation of what they render) for the reason its `# expect: TEXT` line gives: TEXT must
appear in one of the problems ("stage: where: what"), so that a broken file refused for
another reason fails the check. Each deploy/helm/values/broken/rendered/*.yaml (a rendered
object of a good values file with a field set wrong) must be refused by its validator.

Prints one line per file (values file, objects rendered, ok / refused and why) and exits
non-zero, after a line per problem naming the file, the object and the field, when a good file
fails or a broken one is accepted."""

import argparse
import copy
import functools
import glob
import json
import math
import os
import re
import sys
import time

import helm_python as helm
import jsonschema
import kubernetes_validate.utils as kv
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART = os.path.join(ROOT, "deploy/helm/compute-market")
VALUES = os.path.join(ROOT, "deploy/helm/values")
CRDS = os.path.join(ROOT, "deploy/crds")
KUBE = "1.31"
RELEASE, NAMESPACE = "cm", "compute-market"
# the longest endpoint a node announces (bytes); a provider's result URI is it + `/r/<64 hex>`
# (67 bytes), within the program's 128
ANNOUNCE_MAX = 56
EXPECT_RE = re.compile(r"^#\s*expect:\s*(.+?)\s*$", re.M)
UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
SHELLS = {"sh", "bash", "ash", "dash", "zsh", "busybox"}
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# a Solana keypair file: a JSON array of 64 byte values
KEYPAIR_RE = re.compile(r"\[\s*\d{1,3}(\s*,\s*\d{1,3}){63}\s*\]")

# kubernetes-validate reads its schema files again for every object: read each once
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML whose mappings may not repeat a key (two rendered documents run together, a field
    set twice: the API server's strict field validation refuses them, PyYAML keeps the last)."""


def _unique_map(loader, node):
    loader.flatten_mapping(node)
    seen = set()
    for k, _ in node.value:
        key = loader.construct_object(k, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", k.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


UniqueKeyLoader.add_constructor("tag:yaml.org,2002:map", _unique_map)


def rel(path):
    return os.path.relpath(path, ROOT)


class Refused(Exception):
    """A values file or object refused: `stage` says by what, `problems` are (where, what)."""

    def __init__(self, stage, problems, objects=None):
        super().__init__(stage)
        self.stage, self.problems, self.objects = stage, problems, objects

    def first(self):
        where, what = self.problems[0]
        return f"{self.stage}: {where}: {what}" if where else f"{self.stage}: {what}"


def path_str(parts):
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"


def obj_name(obj):
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', '?')}/{meta.get('name', '?')}"


def load_yaml(path):
    with open(path) as f:
        data = yaml.safe_load(f)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SystemExit(f"{rel(path)}: not a YAML mapping")
    return data


def merge_maps(a, b):
    """b over a, as Helm merges `-f` files: maps merged key by key, anything else replaced."""
    out = dict(a)
    for k, v in b.items():
        out[k] = merge_maps(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def quantity_bytes(q):
    """A Kubernetes storage quantity (`8Gi`, `500M`) in bytes, or None."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", str(q))
    return float(m.group(1)) * UNITS[m.group(2)] if m and m.group(2) in UNITS else None


def crd_schemas():
    """(apiVersion, kind) → (file, schema) of every deploy/crds/*.json."""
    out = {}
    for path in sorted(glob.glob(os.path.join(CRDS, "*.json"))):
        with open(path) as f:
            schema = json.load(f)
        props = schema["properties"]
        out[(props["apiVersion"]["const"], props["kind"]["const"])] = (rel(path), schema)
    return out


# ---------------------------------------------------------------------------------- values


def check_values(chart, schema, values):
    """The values over the chart's defaults against values.schema.json: jsonschema's errors
    (each with its path) and Helm's own schema check (the one `helm install` applies)."""
    merged = chart.merge_values(values)
    validator = jsonschema.Draft7Validator(schema)
    problems = [
        (path_str(e.absolute_path), e.message)
        for e in sorted(validator.iter_errors(merged), key=lambda e: list(map(str, e.absolute_path)))
    ]
    try:
        chart.validate_schema(values)
    except helm.HelmError as e:
        if not problems:  # the two disagree: report Helm's
            problems.append(("", "helm: " + " ".join(str(e).split())))
    if problems:
        raise Refused("values.schema.json", problems)
    return merged


def lint(values):
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBE}.0")
    problems = [(m["path"], " ".join(m["error"].split())) for m in report["messages"] if m["severity"] >= 2]
    if problems:
        raise Refused(f"helm lint --strict (Kubernetes {KUBE})", problems)


def render(chart, values, release=RELEASE, namespace=NAMESPACE):
    """The rendered objects, in template order, and NOTES.txt."""
    try:
        out = chart.render(values, name=release, namespace=namespace, is_install=True)
    except helm.HelmError as e:
        raise Refused("render", [("", " ".join(str(e).split()))])
    objects, notes = [], None
    for template in sorted(out):
        text = out[template]
        if template.endswith("NOTES.txt"):
            notes = text
            continue
        if not template.endswith((".yaml", ".yml")):
            continue
        try:
            docs = list(yaml.load_all(text, Loader=UniqueKeyLoader))
        except yaml.YAMLError as e:
            raise Refused("render", [(template.split("/", 1)[1], " ".join(str(e).split()))])
        for i, doc in enumerate(docs):
            if doc:
                objects.append((f"{template.split('/', 1)[1]}#{i}", doc))
    if not notes or not notes.strip():
        raise Refused("render", [("templates/NOTES.txt", "renders empty")])
    return objects, notes, out


# ---------------------------------------------------------------------------------- objects


def validate_object(obj, crds):
    """(validator, problems) of one rendered object."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key in crds:
        file, schema = crds[key]
        validator = jsonschema.Draft7Validator(schema)
        errs = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
        return f"CRD schema {file}", [(path_str(e.absolute_path), e.message) for e in errs]
    stage = f"kubernetes-validate {KUBE} strict"
    try:
        kv.validate(obj, KUBE, strict=True)
    except kv.ValidationError as e:
        return stage, [(path_str(e.path), e.message)]
    except kv.SchemaNotFoundError as e:
        return stage, [("apiVersion", e.message + " (and no CRD schema under deploy/crds)")]
    return stage, []


def pod_specs(obj):
    """(path, pod spec) of every pod template in an object."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        yield "spec.template.spec", (spec.get("template") or {}).get("spec") or {}, (spec.get("template") or {})
    elif kind == "CronJob":
        t = spec["jobTemplate"]["spec"]["template"]
        yield "spec.jobTemplate.spec.template.spec", t.get("spec") or {}, t
    elif kind == "Pod":
        yield "spec", spec, obj
    elif kind == "RayService":
        rc = spec.get("rayClusterConfig") or {}
        head = (rc.get("headGroupSpec") or {}).get("template") or {}
        yield "spec.rayClusterConfig.headGroupSpec.template.spec", head.get("spec") or {}, head
        for i, w in enumerate(rc.get("workerGroupSpecs") or []):
            t = w.get("template") or {}
            yield f"spec.rayClusterConfig.workerGroupSpecs[{i}].template.spec", t.get("spec") or {}, t


def lint_object(obj, keeper_repo):
    """Lint-level problems of one object: (field, what)."""
    p = []
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        p.append(("metadata.name", "missing"))
    else:
        if len(name) > 63:
            p.append(("metadata.name", f"{len(name)} characters, more than 63"))
        if not NAME_RE.match(name):
            p.append(("metadata.name", f"{name!r} is not a DNS label"))
    labels = meta.get("labels") or {}
    for label in ("app.kubernetes.io/name", "app.kubernetes.io/instance"):
        if not labels.get(label):
            p.append((f"metadata.labels.{label}", "missing"))
    if obj.get("kind") == "Secret":
        p.append(("kind", "the chart renders a Secret: keys come from Secrets the operator makes"))
    for path, spec, template in pod_specs(obj):
        tlabels = (template.get("metadata") or {}).get("labels") or {}
        for label in ("app.kubernetes.io/name", "app.kubernetes.io/instance"):
            if not tlabels.get(label):
                p.append((f"{path[:-5]}.metadata.labels.{label}", "missing"))
        psc = spec.get("securityContext") or {}
        if psc.get("runAsNonRoot") is not True:
            p.append((f"{path}.securityContext.runAsNonRoot", "not true"))
        if psc.get("runAsUser", 1) == 0:
            p.append((f"{path}.securityContext.runAsUser", "0 (root)"))
        if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            p.append((f"{path}.securityContext.seccompProfile.type", "not RuntimeDefault"))
        if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
            p.append((path, "uses the host's namespaces"))
        groups = [("containers", spec.get("containers") or []), ("initContainers", spec.get("initContainers") or [])]
        for group, containers in groups:
            for i, c in enumerate(containers):
                cp = f"{path}.{group}[{i}]"
                image = c.get("image") or ""
                last = image.rsplit("/", 1)[-1]
                if "@sha256:" not in image and ":" not in last:
                    p.append((f"{cp}.image", f"{image!r} has no tag"))
                elif last.endswith(":latest"):
                    p.append((f"{cp}.image", f"{image!r}: the tag `latest`"))
                req = (c.get("resources") or {}).get("requests") or {}
                for r in ("cpu", "memory"):
                    if r not in req:
                        p.append((f"{cp}.resources.requests.{r}", "not set"))
                sc = c.get("securityContext") or {}
                if sc.get("readOnlyRootFilesystem") is not True:
                    p.append((f"{cp}.securityContext.readOnlyRootFilesystem", "not true"))
                if sc.get("allowPrivilegeEscalation") is not False:
                    p.append((f"{cp}.securityContext.allowPrivilegeEscalation", "not false"))
                if sc.get("privileged"):
                    p.append((f"{cp}.securityContext.privileged", "true"))
                if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
                    p.append((f"{cp}.securityContext.runAsNonRoot", "not true"))
                if sc.get("runAsUser", psc.get("runAsUser", 1)) == 0:
                    p.append((f"{cp}.securityContext.runAsUser", "0 (root)"))
                if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
                    p.append((f"{cp}.securityContext.capabilities.drop", "does not drop ALL"))
                if (sc.get("capabilities") or {}).get("add"):
                    p.append((f"{cp}.securityContext.capabilities.add", "adds capabilities"))
                cmd = list(c.get("command") or []) + list(c.get("args") or [])
                if cmd and os.path.basename(str(cmd[0])) in SHELLS:
                    p.append((f"{cp}.command", f"runs a shell ({cmd[0]}): the keeper image has none"))
                if image.split("@")[0].rsplit(":", 1)[0] == keeper_repo and c.get("command") != ["/keeper"]:
                    p.append((f"{cp}.command", f"{c.get('command')!r}: the keeper image's entrypoint is [\"/keeper\"]"))
                if sc.get("readOnlyRootFilesystem") and not any(
                        m.get("mountPath") == "/tmp" for m in c.get("volumeMounts") or []):
                    p.append((f"{cp}.volumeMounts", "nothing writable at /tmp under a read-only root"))
    return p


def arg_after(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def component(o):
    return ((o.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")


def selects(selector, labels):
    """Whether a LabelSelector (matchLabels, matchExpressions) selects these labels."""
    labels = labels or {}
    if not (selector.get("matchLabels") or {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions") or []:
        op, key, values = e["operator"], e["key"], e.get("values") or []
        if ((op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values)
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels)):
            return False
    return True


POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def pod_label_sets(objects):
    """The labels of every pod the rendered objects make: each pod template's, and for each
    ordinal of a StatefulSet (its replicas, or the maximum of the ScaledObject scaling it) the
    template's plus the statefulset.kubernetes.io/pod-name label its controller adds."""
    out = []
    for _, o in objects:
        for _, _, t in pod_specs(o):
            labels = (t.get("metadata") or {}).get("labels") or {}
            out.append(labels)
            if o.get("kind") == "StatefulSet":
                name = o["metadata"]["name"]
                n = o["spec"].get("replicas")
                if n is None:
                    n = max([so["spec"].get("maxReplicaCount") or 0 for _, so in objects
                             if so.get("kind") == "ScaledObject"
                             and so["spec"]["scaleTargetRef"].get("name") == name] or [1])
                out += [dict(labels, **{POD_NAME_LABEL: f"{name}-{i}"}) for i in range(n)]
    return out


def chart_invariants(objects, merged, release=RELEASE, namespace=NAMESPACE, app_version=""):
    """What the chart promises, checked on what it rendered: (object, field, what)."""
    p = []
    w, slot = merged["market"]["windows"], merged["market"]["slotSeconds"]
    # docs/PROTOCOL.md §3.8, `longest_task` of §8.1: a dispute opened in the window's last slot
    # has one more window to end, for a provider and for a verifier defending its verdict
    provider_grace = math.ceil((w["submit"] + 2 * (w["join"] + w["commit"] + w["reveal"]) + 2 * w["dispute"]) * slot) + 60
    # the verdict a verifier voted in is held for the dispute window, and a dispute opened in
    # its last slot stays open up to another window while the verifier defends it
    verifier_grace = math.ceil((w["join"] + w["commit"] + w["reveal"] + 2 * w["dispute"]) * slot) + 60
    by_kind = {}
    for _, o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    pods = [(o, t) for o in objects for _, _, t in pod_specs(o[1])]
    image = merged["image"]
    plain_image = f"{image['repository']}:{image['tag'] or app_version}"

    def keeper(o):
        return o["spec"]["template"]["spec"]["containers"][0]

    def url_short(n, field, url):
        if url is not None and len(url.encode()) > ANNOUNCE_MAX:
            p.append((n, field, f"{url!r} is {len(url.encode())} bytes, over the {ANNOUNCE_MAX} a node announces "
                                f"(and result URIs, URL + 67 bytes, must stay within 128)"))

    prov = merged["providers"]
    suffix = image.get("cudaTagSuffix") or ""
    provider_image = plain_image
    if prov["gpus"] > 0 and suffix and not provider_image.endswith(suffix):
        provider_image += suffix
    sts = [o for o in by_kind.get("StatefulSet", []) if component(o) == "provider"]
    # a StatefulSet's pods carry controller-revision-hash `<name>-<hash>` (hash ≤ 10 characters),
    # a label value of at most 63 characters
    for o in by_kind.get("StatefulSet", []):
        if len(o["metadata"]["name"]) > 52:
            p.append((obj_name(o), "metadata.name", f"{len(o['metadata']['name'])} characters, over 52: its pods' "
                                                    "controller-revision-hash label (<name>-<hash>) would pass 63"))
    if prov["enabled"] != bool(sts):
        p.append(("StatefulSet/*-provider", "", f"providers.enabled is {prov['enabled']} but {len(sts)} rendered"))
    for o in sts:
        n, spec = obj_name(o), o["spec"]["template"]["spec"]
        c, name = keeper(o), o["metadata"]["name"]
        args = c["args"]
        if spec.get("terminationGracePeriodSeconds") != provider_grace:
            p.append((n, "spec.template.spec.terminationGracePeriodSeconds",
                      f"{spec.get('terminationGracePeriodSeconds')}, want {provider_grace}"))
        if arg_after(args, "--drain-timeout-s") != str(provider_grace - 30):
            p.append((n, "args --drain-timeout-s", f"{arg_after(args, '--drain-timeout-s')}, want {provider_grace - 30}"))
        if arg_after(args, "--keypair") != "/keys/$(POD_NAME)/keypair.json":
            p.append((n, "args --keypair", f"{arg_after(args, '--keypair')}"))
        url = arg_after(args, "--public-url") or ""
        if "$(POD_NAME)" not in url:
            p.append((n, "args --public-url", "not per pod ($(POD_NAME))"))
        ordinals = prov["autoscaling"]["maxReplicas"] if prov["autoscaling"]["enabled"] else prov["replicas"]
        url_short(n, f"args --public-url (pod {name}-{max(ordinals - 1, 0)})",
                  url.replace("$(POD_NAME)", f"{name}-{max(ordinals - 1, 0)}").replace("$(POD_NAMESPACE)", namespace))
        if c.get("image") != provider_image:
            p.append((n, "containers[0].image", f"{c.get('image')!r}, want {provider_image!r} "
                                                f"(gpus {prov['gpus']}, cudaTagSuffix {suffix!r})"))
        if arg_after(args, "--held-inputs-mib") != str(prov["heldInputsMiB"]):
            p.append((n, "args --held-inputs-mib", f"{arg_after(args, '--held-inputs-mib')}, want {prov['heldInputsMiB']}"))
        if spec.get("runtimeClassName") != (prov.get("runtimeClassName") or None):
            p.append((n, "spec.template.spec.runtimeClassName",
                      f"{spec.get('runtimeClassName')!r}, want {prov.get('runtimeClassName') or None!r}"))
        env = {e["name"]: e for e in c.get("env") or []}
        if ((env.get("POD_NAME") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") != "metadata.name":
            p.append((n, "containers[0].env.POD_NAME", "not the downward API's metadata.name"))
        keys = [v for v in spec["volumes"] if v["name"] == "keys"][0]["projected"]["sources"]
        paths = [s["secret"]["items"][0]["path"] for s in keys]
        if paths != [f"{name}-{i}/keypair.json" for i in range(ordinals)]:
            p.append((n, "volumes.keys.projected.sources", f"{paths}, want one per ordinal 0..{ordinals - 1}"))
        if not all(s["secret"].get("optional") is True for s in keys):
            p.append((n, "volumes.keys.projected.sources", "a Secret not optional"))
        gpus = prov["gpus"]
        limit = ((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
        if (limit or 0) != gpus:
            p.append((n, "containers[0].resources.limits.nvidia.com/gpu", f"{limit}, want {gpus}"))
        if ("--require-gpu" in args) != (gpus > 0):
            p.append((n, "args --require-gpu", f"present: {'--require-gpu' in args}, gpus: {gpus}"))
        for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz"), ("startupProbe", "/livez")):
            if ((c.get(probe) or {}).get("httpGet") or {}).get("path") != path:
                p.append((n, f"containers[0].{probe}", f"not an HTTP GET {path}"))
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        claims = {t["metadata"]["name"]: t for t in o["spec"].get("volumeClaimTemplates") or []}
        if mounts.get("/var/lib/compute-market") not in claims:
            p.append((n, "volumeMounts /var/lib/compute-market", "not a volumeClaimTemplate"))
        else:
            size = claims[mounts["/var/lib/compute-market"]]["spec"]["resources"]["requests"]["storage"]
            if (quantity_bytes(size) or 0) < prov["diskBudgetMiB"] * 2**20:
                p.append((n, "volumeClaimTemplates.spec.resources.requests.storage",
                          f"{size} cannot hold diskBudgetMiB ({prov['diskBudgetMiB']} MiB)"))
        if prov["autoscaling"]["enabled"] == ("replicas" in o["spec"]):
            p.append((n, "spec.replicas", "set while autoscaled, or missing while not"))
    # providers.perPodServices: one ClusterIP Service `<sts>-<i>` per ordinal, selecting only
    # that pod, publishing it while not ready (a draining provider serves its results until the
    # verdict), port http; not scraped (the headless Service is); none without the value
    per_pod = {o["metadata"]["name"]: o for o in by_kind.get("Service", [])
               if POD_NAME_LABEL in (o["spec"].get("selector") or {})}
    want = set()
    if prov["enabled"] and prov.get("perPodServices") and sts:
        ordinals = prov["autoscaling"]["maxReplicas"] if prov["autoscaling"]["enabled"] else prov["replicas"]
        want = {f"{sts[0]['metadata']['name']}-{i}" for i in range(ordinals)}
    if set(per_pod) != want:
        p.append(("Service/*-provider-<i>", "", f"per-pod Services {sorted(per_pod)}, want {sorted(want)} "
                                                f"(providers.perPodServices: {prov.get('perPodServices')})"))
    for name, o in per_pod.items():
        n, spec = obj_name(o), o["spec"]
        if spec.get("selector") != {POD_NAME_LABEL: name}:
            p.append((n, "spec.selector", f"{spec.get('selector')}, want only {POD_NAME_LABEL}: {name}"))
        if spec.get("type", "ClusterIP") != "ClusterIP" or spec.get("clusterIP") == "None":
            p.append((n, "spec.type", f"{spec.get('type')!r} (clusterIP {spec.get('clusterIP')!r}), want a ClusterIP Service"))
        if spec.get("publishNotReadyAddresses") is not True:
            p.append((n, "spec.publishNotReadyAddresses",
                      "not true: a draining provider's results must stay fetchable until the verdict"))
        if [(q.get("name"), q.get("port"), q.get("targetPort")) for q in spec.get("ports") or []] != [("http", merged["port"], "http")]:
            p.append((n, "spec.ports", f"{spec.get('ports')}, want one port http ({merged['port']}) to the pod's port http"))
        if o["metadata"]["labels"].get("compute-market.io/metrics"):
            p.append((n, "metadata.labels.compute-market.io/metrics", "set: the ServiceMonitor would scrape the pod twice"))
    ver = merged["verifiers"]
    keys = ver["keys"] if ver["enabled"] else []
    # one StatefulSet of exactly 1 replica per key: a StatefulSet never runs two pods of one
    # identity (the replacement of an evicted, drained or deleted pod starts once it has
    # terminated), where a Deployment's ReplicaSet starts it beside the draining one
    for o in by_kind.get("Deployment", []) + by_kind.get("ReplicaSet", []) + by_kind.get("DaemonSet", []):
        if component(o) == "verifier":
            p.append((obj_name(o), "kind", "a verifier must be a StatefulSet of 1 replica: a Deployment's "
                                           "replacement pod starts beside the draining one (two voters on one key)"))
    vsts = [o for o in by_kind.get("StatefulSet", []) if component(o) == "verifier"]
    got = sorted(o["metadata"]["labels"].get("compute-market.io/key") for o in vsts)
    if got != sorted(keys):
        p.append(("StatefulSet/*-verifier-*", "", f"verifier StatefulSets for keys {got}, want one per key {sorted(keys)}"))
    services = {o["metadata"]["name"]: o for o in by_kind.get("Service", [])}
    urls = {}
    for o in vsts:
        n, spec = obj_name(o), o["spec"]
        c = keeper(o)
        args = c["args"]
        if spec.get("replicas") != 1:
            p.append((n, "spec.replicas", f"{spec.get('replicas')}: each verifier is a StatefulSet of exactly 1 replica"))
        if spec.get("podManagementPolicy") != "OrderedReady":
            p.append((n, "spec.podManagementPolicy", f"{spec.get('podManagementPolicy')!r}, want 'OrderedReady'"))
        if (spec.get("updateStrategy") or {}).get("type") != "RollingUpdate":
            p.append((n, "spec.updateStrategy.type", f"{(spec.get('updateStrategy') or {}).get('type')!r}, want 'RollingUpdate'"))
        retention = spec.get("persistentVolumeClaimRetentionPolicy") or {}
        if (retention.get("whenDeleted"), retention.get("whenScaled")) != ("Retain", "Retain"):
            p.append((n, "spec.persistentVolumeClaimRetentionPolicy", f"{retention}, want Retain when deleted and scaled"))
        svc = services.get(spec.get("serviceName"))
        if not svc:
            p.append((n, "spec.serviceName", f"{spec.get('serviceName')!r}: no Service of that name rendered"))
        else:
            if not selects({"matchLabels": svc["spec"].get("selector") or {}}, spec["template"]["metadata"]["labels"]):
                p.append((obj_name(svc), "spec.selector", f"does not select the pod of {n}"))
            if svc["spec"].get("publishNotReadyAddresses") is not True:
                p.append((obj_name(svc), "spec.publishNotReadyAddresses",
                          "not true: a draining verifier's kept results (PROTOCOL §8.12) must stay fetchable"))
        if spec["template"]["spec"].get("terminationGracePeriodSeconds") != verifier_grace:
            p.append((n, "spec.template.spec.terminationGracePeriodSeconds",
                      f"{spec['template']['spec'].get('terminationGracePeriodSeconds')}, want {verifier_grace}"))
        if arg_after(args, "--drain-timeout-s") != str(verifier_grace - 30):
            p.append((n, "args --drain-timeout-s", f"want {verifier_grace - 30}"))
        if ("--crank" in args) != ver["crank"]:
            p.append((n, "args --crank", f"present: {'--crank' in args}, verifiers.crank: {ver['crank']}"))
        if arg_after(args, "--reserve-max-bytes") != str(ver["reserveMaxMiB"] * 2**20):
            p.append((n, "args --reserve-max-bytes",
                      f"{arg_after(args, '--reserve-max-bytes')}, want {ver['reserveMaxMiB'] * 2**20} (reserveMaxMiB · 2^20)"))
        if arg_after(args, "--held-inputs-mib") != str(ver["heldInputsMiB"]):
            p.append((n, "args --held-inputs-mib", f"{arg_after(args, '--held-inputs-mib')}, want {ver['heldInputsMiB']}"))
        if c.get("image") != plain_image:
            p.append((n, "containers[0].image", f"{c.get('image')!r}, want the plain {plain_image!r}"))
        url = arg_after(args, "--public-url")
        url_short(n, "args --public-url", url)
        if url in urls:
            p.append((n, "args --public-url", f"{url!r} shared with {urls[url]}"))
        urls[url] = n
        # the store (the sealed votes' salts) on a PVC of its own, never an emptyDir
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        claims = {t["metadata"]["name"]: t for t in spec.get("volumeClaimTemplates") or []}
        store = mounts.get("/var/lib/compute-market")
        if store not in claims:
            p.append((n, "volumeMounts /var/lib/compute-market",
                      f"volume {store!r} is not a volumeClaimTemplate: the store holds the sealed votes' salts"))
        else:
            size = claims[store]["spec"]["resources"]["requests"]["storage"]
            if (quantity_bytes(size) or 0) <= ver["reserveMaxMiB"] * 2**20:
                p.append((n, "volumeClaimTemplates.spec.resources.requests.storage",
                          f"{size} cannot hold reserveMaxMiB ({ver['reserveMaxMiB']} MiB) and the store"))
        for v in spec["template"]["spec"].get("volumes") or []:
            if v["name"] == store:
                p.append((n, f"volumes.{store}", "a pod volume shadows the volumeClaimTemplate of the store"))
    # each key Secret names one role: the providers' ordinals, the verifiers' keys and the Ray
    # pool's provider
    secrets = {}
    for _, o in objects:
        for _, spec, _ in pod_specs(o):
            for v in spec.get("volumes") or []:
                if v["name"] != "keys":
                    continue
                names = ([src["secret"]["name"] for src in v["projected"]["sources"] if "secret" in src]
                         if "projected" in v else [v["secret"]["secretName"]])
                for name in names:
                    if name in secrets:
                        p.append((obj_name(o), "volumes.keys", f"the key Secret {name!r} is also mounted by "
                                                               f"{secrets[name]}: one Secret, two keepers on one key"))
                    secrets.setdefault(name, obj_name(o))
    for o in by_kind.get("Deployment", []):
        if o["metadata"]["labels"].get("app.kubernetes.io/component") == "store" and keeper(o).get("image") != plain_image:
            p.append((obj_name(o), "containers[0].image", f"{keeper(o).get('image')!r}, want the plain {plain_image!r}"))
    for o in by_kind.get("RayService", []):
        n, rc = obj_name(o), o["spec"]["rayClusterConfig"]
        head = rc["headGroupSpec"]["template"]["spec"]
        if head.get("terminationGracePeriodSeconds") != provider_grace:
            p.append((n, "headGroupSpec.template.spec.terminationGracePeriodSeconds",
                      f"{head.get('terminationGracePeriodSeconds')}, want {provider_grace}"))
        prov_c = [c for c in head["containers"] if c["name"] == "provider"]
        args = prov_c[0]["args"] if prov_c else []
        if len(args) != 9 or "drain_timeout_s=" not in args[0] or "allow_private_urls=" not in args[0]:
            p.append((n, "headGroupSpec provider args", "not the program and its 8 arguments"))
        else:
            url_short(n, "headGroupSpec provider public_url", args[6])
            if args[7] != ("1" if merged.get("allowPrivateUrls") else "0"):
                p.append((n, "headGroupSpec provider allow_private_urls", f"{args[7]}, allowPrivateUrls: {merged.get('allowPrivateUrls')}"))
            if args[8] != str(provider_grace - 30):
                p.append((n, "headGroupSpec provider drain_timeout_s", f"{args[8]}, want {provider_grace - 30}"))
        if rc.get("enableInTreeAutoscaling") is not False:
            p.append((n, "rayClusterConfig.enableInTreeAutoscaling", "not false"))
        want = merged["ray"]["workers"]["replicas"]
        for i, g in enumerate(rc.get("workerGroupSpecs") or []):
            if (g.get("replicas"), g.get("minReplicas"), g.get("maxReplicas")) != (want, want, want):
                p.append((n, f"workerGroupSpecs[{i}] replicas/minReplicas/maxReplicas",
                          f"{g.get('replicas')}/{g.get('minReplicas')}/{g.get('maxReplicas')}, want {want} each (a fixed pool)"))
    # the Ray pool's NetworkPolicies: Ray's ports admit only this release's pods (and the
    # KubeRay operator, and the operator's own rules, on named ports); the provider's HTTP port
    # is open to all
    ray_pods = [t for o, t in pods if o[1]["kind"] == "RayService"]
    policies = by_kind.get("NetworkPolicy", [])
    if merged["ray"]["enabled"]:
        release_peer = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "compute-market",
                                                        "app.kubernetes.io/instance": release}}}
        allowed = [release_peer] + (merged["ray"].get("networkPolicy") or {}).get("kubeRayOperator", [])
        extra = (merged["ray"].get("networkPolicy") or {}).get("extraIngress", [])
        for t in ray_pods:
            labels = t["metadata"]["labels"]
            mine = [o for o in policies if selects(o["spec"]["podSelector"], labels)]
            where = f"RayService pod {labels.get('app.kubernetes.io/component')}"
            if not any("Ingress" in (o["spec"].get("policyTypes") or []) for o in mine):
                p.append((where, "", "no NetworkPolicy with policyTypes Ingress selects it"))
            for o in mine:
                for i, rule in enumerate(o["spec"].get("ingress") or []):
                    ports = [q.get("port") for q in rule.get("ports") or []]
                    if rule in extra:
                        continue
                    if not rule.get("from"):
                        if ports != [merged["port"]] or labels.get("app.kubernetes.io/component") != "ray-head":
                            p.append((obj_name(o), f"spec.ingress[{i}]", f"admits ports {ports or 'all'} of the "
                                      f"{where} from anywhere: only the provider's HTTP port ({merged['port']}) may be"))
                    elif any(peer not in allowed for peer in rule["from"]):
                        p.append((obj_name(o), f"spec.ingress[{i}].from",
                                  "a peer that is neither this release's pods nor the KubeRay operator"))
        heads = [t for t in ray_pods if t["metadata"]["labels"].get("app.kubernetes.io/component") == "ray-head"]
        for t in heads:
            if not any(not r.get("from") and [q.get("port") for q in r.get("ports") or []] == [merged["port"]]
                       for o in policies if selects(o["spec"]["podSelector"], t["metadata"]["labels"])
                       for r in o["spec"].get("ingress") or []):
                p.append(("RayService pod ray-head", "", f"the provider's HTTP port {merged['port']} is not open to all"))
    elif policies:
        p.append((obj_name(policies[0]), "", "a NetworkPolicy rendered without ray.enabled"))
    for o in policies:
        if not any(selects(o["spec"]["podSelector"], (t.get("metadata") or {}).get("labels")) for _, t in pods):
            p.append((obj_name(o), "spec.podSelector", "selects no pod this chart renders"))
    # selectors select something (a pod's labels: its template's, and a StatefulSet pod's
    # statefulset.kubernetes.io/pod-name)
    pod_labels = pod_label_sets(objects)
    for o in by_kind.get("Service", []) + by_kind.get("PodDisruptionBudget", []):
        sel = o["spec"].get("selector") or {}
        sel = sel.get("matchLabels", sel) if o["kind"] == "PodDisruptionBudget" else sel
        if not any(sel.items() <= labels.items() for labels in pod_labels):
            p.append((obj_name(o), "spec.selector", f"{sel} selects no pod this chart renders"))
    for o in by_kind.get("ServiceMonitor", []):
        sel = o["spec"]["selector"].get("matchLabels") or {}
        if not any(sel.items() <= s["metadata"]["labels"].items() for s in by_kind.get("Service", [])):
            p.append((obj_name(o), "spec.selector.matchLabels", "selects no Service"))
    for o in by_kind.get("ScaledObject", []):
        if (o["spec"].get("minReplicaCount") or 0) < 1:
            p.append((obj_name(o), "spec.minReplicaCount", f"{o['spec'].get('minReplicaCount')}: at 0 replicas no "
                      "provider reports keeper_claimable_tasks, and KEDA never scales back up"))
        ref = o["spec"]["scaleTargetRef"]
        if not any(t["kind"] == ref.get("kind") and t["metadata"]["name"] == ref["name"] for _, t in objects):
            p.append((obj_name(o), "spec.scaleTargetRef", f"{ref} is not rendered"))
    return p


def check_objects(objects, crds, merged, text, release=RELEASE, namespace=NAMESPACE, app_version=""):
    """Validation, lint and invariants of one render: raises Refused naming object and field."""
    problems, stages = [], set()
    for where, o in objects:
        stage, errs = validate_object(o, crds)
        for field, what in errs:
            problems.append((f"{obj_name(o)} ({where}): {field}", what))
            stages.add(stage)
    for where, o in objects:
        for field, what in lint_object(o, merged["image"]["repository"]):
            problems.append((f"{obj_name(o)} ({where}): {field}", what))
            stages.add("lint")
    if not problems:
        for n, field, what in chart_invariants(objects, merged, release, namespace, app_version):
            problems.append((f"{n}: {field}" if field else n, what))
            stages.add("chart invariants")
    names = [(o["kind"], o["metadata"].get("name")) for _, o in objects]
    for dup in sorted({x for x in names if names.count(x) > 1}):
        problems.append((f"{dup[0]}/{dup[1]}", "rendered twice"))
        stages.add("lint")
    if KEYPAIR_RE.search(text):
        problems.append(("(output)", "holds what looks like a keypair (64 byte values)"))
        stages.add("lint")
    if problems:
        raise Refused(" + ".join(sorted(stages)), problems, len(objects))


def process(chart, schema, crds, values, release=RELEASE, namespace=NAMESPACE):
    """Objects rendered from one set of values; raises Refused."""
    merged = check_values(chart, schema, values)
    objects, notes, out = render(chart, values, release, namespace)
    check_notes(notes, merged)
    check_objects(objects, crds, merged, "\n".join(out.values()), release, namespace, app_version())
    lint(values)
    return len(objects)


def check_notes(notes, merged):
    """NOTES.txt names the store by store.publicUrl when it is set (the URL clients use)."""
    store = merged["store"]
    if store["enabled"] and store.get("publicUrl") and store["publicUrl"] not in notes:
        raise Refused("render", [("templates/NOTES.txt", f"does not print store.publicUrl {store['publicUrl']!r}")])


@functools.lru_cache(maxsize=None)
def app_version():
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        return str(yaml.safe_load(f)["appVersion"])


# ---------------------------------------------------------------------------------- mutations


def set_path(obj, path, value):
    parts = []
    for seg in path.split("."):
        m = re.fullmatch(r"([^\[\]]+)((?:\[\d+\])*)", seg)
        if not m:
            raise SystemExit(f"bad path segment {seg!r} in {path!r}")
        parts.append(m.group(1))
        parts += [int(i) for i in re.findall(r"\[(\d+)\]", m.group(2))]
    cur = obj
    for p in parts[:-1]:
        cur = cur[p]
    cur[parts[-1]] = value


def mutation(chart, crds, path):
    """A rendered object with fields set wrong: (objects, refusal or None)."""
    spec = load_yaml(path)
    values = load_yaml(os.path.join(VALUES, spec["values"]))
    objects, _, _ = render(chart, values)
    kind, name = spec["object"].split("/", 1)
    matches = [o for _, o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if not matches:
        raise SystemExit(f"{rel(path)}: {spec['values']} renders no {spec['object']}")
    obj = copy.deepcopy(matches[0])
    for field, value in spec["set"].items():
        set_path(obj, field, value)
    stage, errs = validate_object(obj, crds)
    expect = spec.get("refusedBy")
    if errs and expect and not stage.startswith(expect):
        return len(objects), None, f"refused by {stage}, expected {expect}"
    if errs:
        return len(objects), Refused(stage, [(f"{obj_name(obj)}: {f}", w) for f, w in errs]), None
    return len(objects), None, None


# ---------------------------------------------------------------------------------- main


def expected_refusal(path):
    """The `# expect: TEXT` line of a broken values file, or None."""
    with open(path) as f:
        m = EXPECT_RE.search(f.read())
    return m.group(1) if m else None


def check_broken(chart, schema, crds, path, verbose):
    """(row, failures) of one broken values file: refused, and for the reason it expects."""
    want = expected_refusal(path)
    try:
        n = process(chart, schema, crds, load_yaml(path))
    except Refused as e:
        objects = e.objects if e.objects is not None else "-"
        lines = [f"{e.stage}: {where}: {what}" if where else f"{e.stage}: {what}" for where, what in e.problems]
        hits = [line for line in lines if want and want in line]
        rows = [(rel(path), objects, "refused: " + (hits[0] if hits else lines[0]))]
        if verbose:
            rows += [("", "", f"  {line}") for line in lines if line != rows[0][2][len("refused: "):]]
        if not want:
            return rows, [f"FAIL {rel(path)}: no `# expect: TEXT` line saying why it must be refused"]
        if not hits:
            return rows, [f"FAIL {rel(path)}: refused, but not as `# expect: {want}` says: {lines[0]}"]
        return rows, []
    return [(rel(path), n, "ACCEPTED (must be refused)")], [
        f"FAIL {rel(path)}: accepted, but a broken values file must be refused"]


def main():
    ap = argparse.ArgumentParser(
        prog="scripts/chart-check", description=__doc__.split("\n\n")[0],
        usage="%(prog)s [-v] [-f VALUES.yaml ...] [--release NAME] [--namespace NS]")
    ap.add_argument("-v", "--verbose", action="store_true", help="every problem, not the first of each file")
    ap.add_argument("-f", "--values", action="append", metavar="VALUES.yaml", default=[],
                    help="check these values (repeatable: merged in order, as helm install -f A -f B) "
                         "instead of deploy/helm/values/; they must be accepted")
    ap.add_argument("--release", default=RELEASE, metavar="NAME",
                    help=f"release name the accepted values are rendered as (default {RELEASE})")
    ap.add_argument("--namespace", default=NAMESPACE, metavar="NS",
                    help=f"namespace the accepted values are rendered in (default {NAMESPACE})")
    args = ap.parse_args()
    if len(args.release) > 53 or not NAME_RE.match(args.release):
        ap.error(f"--release {args.release!r}: a DNS label of at most 53 characters, as Helm requires")
    if len(args.namespace) > 63 or not NAME_RE.match(args.namespace):
        ap.error(f"--namespace {args.namespace!r}: a DNS label of at most 63 characters")
    for path in args.values:
        if not os.path.isfile(path):
            ap.error(f"-f {path}: no such file")
    t0 = time.time()
    with open(os.path.join(CHART, "values.schema.json")) as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    crds = crd_schemas()
    for file, s in crds.values():
        jsonschema.Draft7Validator.check_schema(s)
    rows, failures = [], []
    if args.values:
        # the operator's own values, merged as Helm merges -f files: one row
        good = [(" + ".join(args.values), functools.reduce(merge_maps, map(load_yaml, args.values), {}))]
        broken, mutations = [], []
    else:
        good = [(rel(p), load_yaml(p)) for p in sorted(glob.glob(os.path.join(VALUES, "*.yaml")))]
        broken = sorted(glob.glob(os.path.join(VALUES, "broken", "*.yaml")))
        mutations = sorted(glob.glob(os.path.join(VALUES, "broken", "rendered", "*.yaml")))
        if not good or not broken or not mutations:
            raise SystemExit("chart-check: no values files, broken values files or rendered mutations found")
    with helm.Chart.load(CHART) as chart:
        for label, values in good:
            try:
                n = process(chart, schema, crds, values, args.release, args.namespace)
                rows.append((label, n, "ok"))
            except Refused as e:
                rows.append((label, e.objects if e.objects is not None else "-", "FAILED: " + e.first()))
                for where, what in e.problems:
                    failures.append(f"FAIL {label}: {e.stage}: {where}: {what}" if where else f"FAIL {label}: {e.stage}: {what}")
        for path in broken:
            r, f = check_broken(chart, schema, crds, path, args.verbose)
            rows += r
            failures += f
        for path in mutations:
            n, refusal, wrong = mutation(chart, crds, path)
            if refusal:
                rows.append((rel(path), n, "refused: " + refusal.first()))
            else:
                why = wrong or "accepted, but the mutated object must be refused"
                rows.append((rel(path), n, "ACCEPTED: " + why))
                failures.append(f"FAIL {rel(path)}: {why}")
    width = max(len(r[0]) for r in rows)
    print(f"{'values file':<{width}}  objects  result")
    for file, n, result in rows:
        print(f"{file:<{width}}  {str(n):>7}  {result}")
    for f in failures:
        print(f, file=sys.stderr)
    what = (f"{len(good)} values files, {len(broken)} broken values files, {len(mutations)} mutated objects"
            if not args.values else f"{len(args.values)} values file{'s' if len(args.values) > 1 else ''} merged")
    print(f"chart-check: {what} (release {args.release} in namespace {args.namespace}); {len(failures)} problems; "
          f"Kubernetes {KUBE} (kubernetes-validate {kv.__version__}), Helm SDK {helm.helm_sdk_version()} "
          f"(helm-python-sdk, libhelm_c {helm.helm_c_version()}), in {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
