"""Pod Security Standards "restricted" (Kubernetes 1.28+, profile
"latest"), plus tally's own deploy rules, checked on rendered manifests.

    python policy.py FILE...        every violation, exit 1 if any
    python policy.py --self-test    the rules against testdata/violations.yaml

Each rule has an id. The self-test fixture's documents carry the ids they
must break in the annotation `tally.test/expect` (comma-separated, empty
for none), so a rule that stops detecting what it should fails CI.
"""

import sys
from pathlib import Path

import yaml

# Pod templates of these kinds are checked (path to the pod spec).
POD_PATHS = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
# Long-running workloads need probes; a Job runs to completion.
SERVING_KINDS = {"Deployment", "StatefulSet", "DaemonSet"}
# Containers allowed to lack probes, with the reason (none: the worker has
# /livez and /healthz since issue 20 item 1).
PROBE_EXEMPT: dict[str, str] = {}
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
    "persistentVolumeClaim", "projected", "secret", "image",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
SECCOMP_OK = {"RuntimeDefault", "Localhost"}


def dig(doc, path):
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def containers(pod):
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in pod.get(field) or []:
            yield c


def check_pod(kind, pod, annotations):
    """(rule id, message) for each violation of one pod spec."""
    out = []
    psc = pod.get("securityContext") or {}
    ctrs = list(containers(pod))

    # Baseline.
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(host):
            out.append(("host-namespaces", f"{host} is set"))
    for v in pod.get("volumes") or []:
        types = set(v) - {"name"}
        if "hostPath" in types:
            out.append(("host-path", f"volume {v.get('name')} is a hostPath"))
        elif not types <= RESTRICTED_VOLUMES:
            out.append(("volume-types", f"volume {v.get('name')}: {sorted(types - RESTRICTED_VOLUMES)}"))
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(("sysctls", f"unsafe sysctl {s.get('name')}"))
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or str(value).startswith("localhost/")
        ):
            out.append(("apparmor", f"{key}: {value}"))

    def common(where, sc):
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(("host-process", f"{where}: hostProcess"))
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            out.append(("selinux", f"{where}: seLinuxOptions {se}"))
        aa = (sc.get("appArmorProfile") or {}).get("type")
        if aa not in (None, "RuntimeDefault", "Localhost"):
            out.append(("apparmor", f"{where}: appArmorProfile {aa}"))
        if sc.get("runAsUser") == 0:
            out.append(("run-as-user", f"{where}: runAsUser 0"))
        if sc.get("runAsNonRoot") is False:
            out.append(("run-as-non-root", f"{where}: runAsNonRoot false"))
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp is not None and seccomp not in SECCOMP_OK:
            out.append(("seccomp", f"{where}: seccompProfile {seccomp}"))

    common("pod", psc)
    pod_non_root = psc.get("runAsNonRoot") is True
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type") in SECCOMP_OK
    if pod.get("automountServiceAccountToken") is not False:
        out.append(("service-account-token", "automountServiceAccountToken is not false"))

    for c in ctrs:
        name = c.get("name")
        where = f"container {name}"
        sc = c.get("securityContext") or {}
        common(where, sc)
        if sc.get("privileged"):
            out.append(("privileged", f"{where}: privileged"))
        if (sc.get("procMount") or "Default") != "Default":
            out.append(("proc-mount", f"{where}: procMount {sc.get('procMount')}"))
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(("host-ports", f"{where}: hostPort {p['hostPort']}"))
        # Restricted.
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(("privilege-escalation", f"{where}: allowPrivilegeEscalation is not false"))
        if not pod_non_root and sc.get("runAsNonRoot") is not True:
            out.append(("run-as-non-root", f"{where}: runAsNonRoot not set (nor on the pod)"))
        if not pod_seccomp and (sc.get("seccompProfile") or {}).get("type") not in SECCOMP_OK:
            out.append(("seccomp", f"{where}: no RuntimeDefault/Localhost seccompProfile (nor on the pod)"))
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(("capabilities", f"{where}: capabilities do not drop ALL"))
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(("capabilities", f"{where}: adds {caps.get('add')}"))
        # tally's own rules.
        if sc.get("readOnlyRootFilesystem") is not True:
            out.append(("read-only-root", f"{where}: readOnlyRootFilesystem is not true"))
        image = c.get("image") or ""
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        if "@sha256:" not in image and (not tag or tag == "latest"):
            out.append(("image-tag", f"{where}: image {image!r} has no pinned tag"))
        res = c.get("resources") or {}
        if not {"cpu", "memory"} <= set(res.get("requests") or {}) or "memory" not in (res.get("limits") or {}):
            out.append(("resources", f"{where}: needs cpu and memory requests and a memory limit"))
        if kind in SERVING_KINDS and name not in PROBE_EXEMPT:
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if probe not in c:
                    out.append(("probes", f"{where}: no {probe}"))
    return out


def check_doc(doc):
    kind = doc.get("kind")
    out = []
    if kind in POD_PATHS:
        pod = dig(doc, POD_PATHS[kind]) or {}
        meta_path = POD_PATHS[kind][:-1] + ("metadata",)
        annotations = (dig(doc, meta_path) or {}).get("annotations")
        out += check_pod(kind, pod, annotations)
    if kind == "Service":
        for p in dig(doc, ("spec", "ports")) or []:
            if p.get("name") == "grpc" and p.get("appProtocol") not in ("kubernetes.io/h2c", "https"):
                out.append(("app-protocol", f"port grpc: appProtocol {p.get('appProtocol')!r}"))
    return out


def load(path):
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


def name_of(doc):
    return f"{doc.get('kind')}/{dig(doc, ('metadata', 'name'))}"


def main(files):
    bad = 0
    checked = 0
    for f in files:
        for doc in load(f):
            checked += 1
            for rule, msg in check_doc(doc):
                print(f"FAIL {f} {name_of(doc)} [{rule}] {msg}")
                bad += 1
    print(f"policy: {checked} objects checked, {bad} violations")
    return 1 if bad else 0


def self_test():
    fixture = Path(__file__).with_name("testdata") / "violations.yaml"
    failed = 0
    docs = load(fixture)
    for doc in docs:
        raw = dig(doc, ("metadata", "annotations", "tally.test/expect")) or ""
        want = {r for r in raw.split(",") if r}
        got = {rule for rule, _ in check_doc(doc)}
        if got != want:
            failed += 1
            print(f"FAIL self-test {name_of(doc)}: want {sorted(want)}, got {sorted(got)}")
    print(f"policy self-test: {len(docs) - failed} passed, {failed} failed")
    return 1 if failed or not docs else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(self_test() if args == ["--self-test"] else main(args))
