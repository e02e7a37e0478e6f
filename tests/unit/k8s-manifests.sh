#!/bin/bash
# examples/kubernetes: each manifest parses as YAML and says what the README promises:
# the DaemonSet in the host's pid namespace with CAP_PERFMON alone (all else dropped, not
# privileged), the socket directory a hostPath that the application pod mounts, the pod
# with no capability and no host namespace.
set -euo pipefail
dir=${PMC_SOURCE_DIR:?}/examples/kubernetes
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml is missing"; exit 77; }
python3 - "$dir" <<'PY'
import sys, yaml, pathlib
d = pathlib.Path(sys.argv[1])
docs = {}
for f in sorted(d.glob("*.yaml")):
    for doc in yaml.safe_load_all(f.read_text()):
        docs[doc["kind"]] = doc
        print(f"ok - {f.name} parses: {doc['kind']} {doc['metadata']['name']}")
ds, pod = docs["DaemonSet"], docs["Pod"]
spec = ds["spec"]["template"]["spec"]
assert spec.get("hostPID") is True, "the DaemonSet must use the host's pid namespace"
assert not spec.get("hostNetwork") and not spec.get("hostIPC"), "no other host namespace"
c = spec["containers"][0]
sc = c["securityContext"]
assert sc["capabilities"]["add"] == ["PERFMON"], sc
assert sc["capabilities"]["drop"] == ["ALL"], sc
assert sc.get("privileged") is False and sc.get("allowPrivilegeEscalation") is False
sock_vol = {v["name"]: v for v in spec["volumes"]}
mount = [m for m in c["volumeMounts"] if m["mountPath"] == "/run/pmcdaemon"][0]
assert sock_vol[mount["name"]]["hostPath"]["path"] == "/run/pmcdaemon"
assert "/run/pmcdaemon/pmc.sock" in c["command"]
print("ok - DaemonSet: hostPID, CAP_PERFMON only, socket directory on the host")
ps = pod["spec"]
assert not any(ps.get(k) for k in ("hostPID", "hostNetwork", "hostIPC"))
pc = ps["containers"][0]
assert pc["securityContext"]["capabilities"]["drop"] == ["ALL"]
assert "add" not in pc["securityContext"]["capabilities"]
env = {e["name"]: e["value"] for e in pc["env"]}
assert env["PMC_SOCKET"] == "/run/pmcdaemon/pmc.sock"
vols = {v["name"]: v for v in ps["volumes"]}
m = [m for m in pc["volumeMounts"] if m["mountPath"] == "/run/pmcdaemon"][0]
assert vols[m["name"]]["hostPath"]["path"] == "/run/pmcdaemon"
print("ok - Pod: no capability, no host namespace, the socket mounted, PMC_SOCKET set")
PY
