#!/usr/bin/env python3
"""Checks every object in the given deploy/k8s folders against the Kubernetes
API schema that Debian's python3-kubernetes carries: the official client's
models, generated from the API server's OpenAPI document. Every field must be
one the kind's schema has, with a value of its type, and every field the
schema requires must be there. Kustomization files are checked for the fields
kustomize reads and for resources that exist. A LeaderWorkerSet (a CRD, which
the client does not know) is checked against its API's fields, written out
below from the LWS API reference (leaderworkerset.x-k8s.io/v1), and its pod
templates against the pod schema. Before the manifests, the checker proves
itself on manifests with known mistakes.

    check_k8s_schema.py DIR...

Exit 0: valid; 1: errors, each naming the file, the object and the field's
path; 77: python3-kubernetes is not installed (CTest reports a skip).
"""

import pathlib
import sys

import yaml

try:
    import kubernetes.client as k8s
except ImportError:
    print("check_k8s_schema: python3-kubernetes is not installed (scripts/setup.sh installs it): skipped")
    sys.exit(77)

KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "resources", "namespace", "namePrefix", "nameSuffix", "commonLabels",
                        "labels", "commonAnnotations", "images", "patches", "configMapGenerator",
                        "secretGenerator", "replicas", "components"}
SCALARS = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "datetime": (str,), "date": (str,),
           "quantity": (str, int, float)}
# Where the client's types are narrower than the API's: a resource quantity is
# int-or-string ("64Gi", or 1 GPU), the client types it str.
OVERRIDES = {("V1ResourceRequirements", "limits"): "dict(str, quantity)",
             ("V1ResourceRequirements", "requests"): "dict(str, quantity)"}
# Fields the API gained after the client's version (22.6: Kubernetes 1.22), with
# their schema: the gRPC probe (beta in 1.24, GA in 1.27).
NEWER_FIELDS = {("V1Probe", "grpc"): "V1GRPCAction"}
NEWER_MODELS = {"V1GRPCAction": ({"port": "int", "service": "str"}, {"port"})}
# Custom resources: model -> (field -> type, required fields), the types as the
# client's models write them, plus "enum:A|B" for the values the API allows.
# LeaderWorkerSet, from kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go.
CRD_KINDS = {("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "LwsV1LeaderWorkerSet"}
NEWER_MODELS.update({
    "LwsV1LeaderWorkerSet": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                              "spec": "LwsV1Spec", "status": "object"}, {"apiVersion", "kind", "metadata", "spec"}),
    "LwsV1Spec": ({"replicas": "int", "leaderWorkerTemplate": "LwsV1LeaderWorkerTemplate",
                   "rolloutStrategy": "LwsV1RolloutStrategy", "startupPolicy": "enum:LeaderCreated|LeaderReady",
                   "networkConfig": "LwsV1NetworkConfig"}, {"leaderWorkerTemplate"}),
    "LwsV1LeaderWorkerTemplate": (
        {"leaderTemplate": "V1PodTemplateSpec", "workerTemplate": "V1PodTemplateSpec", "size": "int",
         "restartPolicy": "enum:Default|RecreateGroupOnPodRestart|RecreateGroupAfterStart|None",
         "subGroupPolicy": "LwsV1SubGroupPolicy", "volumeClaimTemplates": "list[V1PersistentVolumeClaim]",
         "persistentVolumeClaimRetentionPolicy": "V1StatefulSetPersistentVolumeClaimRetentionPolicy"},
        {"workerTemplate"}),
    "LwsV1RolloutStrategy": ({"type": "enum:RollingUpdate",
                              "rollingUpdateConfiguration": "LwsV1RollingUpdateConfiguration"}, {"type"}),
    "LwsV1RollingUpdateConfiguration": ({"partition": "int", "maxUnavailable": "object", "maxSurge": "object"},
                                        set()),
    "LwsV1SubGroupPolicy": ({"subGroupPolicyType": "enum:LeaderWorker|LeaderExcluded", "subGroupSize": "int"}, set()),
    "LwsV1NetworkConfig": ({"subdomainPolicy": "enum:Shared|UniquePerReplica"}, {"subdomainPolicy"}),
})


def model_name(api_version, kind):
    """apps/v1 Deployment -> V1Deployment; v1 Service -> V1Service; batch/v1beta1 CronJob -> V1beta1CronJob."""
    version = api_version.split("/")[-1]
    return version[0].upper() + version[1:] + kind


def check_value(value, typ, path, errors):
    if typ == "object":  # IntOrString and free-form fields
        return
    if typ.startswith("list["):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            check_value(item, typ[5:-1], f"{path}[{i}]", errors)
        return
    if typ.startswith("dict("):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map, got {type(value).__name__}")
            return
        inner = typ[5:-1].split(", ", 1)[1]
        for key, item in value.items():
            check_value(item, inner, f"{path}.{key}", errors)
        return
    if typ.startswith("enum:"):
        allowed = typ[5:].split("|")
        if value not in allowed:
            errors.append(f"{path}: {value!r} is not one of {', '.join(allowed)}")
        return
    if typ in SCALARS:
        ok = isinstance(value, SCALARS[typ]) and not (typ in ("int", "float") and isinstance(value, bool))
        if not ok:
            errors.append(f"{path}: expected {typ}, got {type(value).__name__} {value!r}")
        return
    if typ in NEWER_MODELS:
        fields, required = NEWER_MODELS[typ]
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a {typ} object, got {type(value).__name__}")
            return
        for key, item in value.items():
            if key not in fields:
                errors.append(f"{path}.{key}: not a field of {typ}")
                continue
            found = []
            check_value(item, fields[key], f"{path}.{key}", found)
            if not found and getattr(k8s, fields[key], None) is not None:
                check_required(item, fields[key], f"{path}.{key}", found)  # a pod template inside a CRD
            errors.extend(found)
        for key in sorted(required - value.keys()):
            errors.append(f"{path}: {typ} requires {key}")
        return
    model = getattr(k8s, typ, None)
    if model is None:
        errors.append(f"{path}: the schema names an unknown type {typ}")
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a {typ} object, got {type(value).__name__}")
        return
    by_json = {json: attr for attr, json in model.attribute_map.items()}
    for key, item in value.items():
        if (typ, key) in NEWER_FIELDS:
            check_value(item, NEWER_FIELDS[(typ, key)], f"{path}.{key}", errors)
            continue
        if key not in by_json:
            errors.append(f"{path}.{key}: not a field of {typ}")
            continue
        field_type = OVERRIDES.get((typ, key), model.openapi_types[by_json[key]])
        check_value(item, field_type, f"{path}.{key}", errors)


def check_required(doc, typ, path, errors):
    """The models' own checks: a required field that is missing raises ValueError."""
    try:
        k8s.ApiClient()._ApiClient__deserialize(doc, typ)
    except ValueError as e:
        errors.append(f"{path}: {e}")


def check_object(doc, where, errors, folder=None):
    if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
        errors.append(f"{where}: not a Kubernetes object (apiVersion and kind)")
        return
    kind, api_version = doc["kind"], doc["apiVersion"]
    where = f"{where} {kind}/{doc.get('metadata', {}).get('name', '?')}"
    if kind == "Kustomization":
        for key in doc:
            if key not in KUSTOMIZATION_FIELDS:
                errors.append(f"{where}.{key}: not a field kustomize reads")
        for resource in doc.get("resources", []):
            if folder is not None and not (folder / resource).exists():
                errors.append(f"{where}.resources: {resource} does not exist")
        return
    if (api_version, kind) in CRD_KINDS:
        check_value(doc, CRD_KINDS[(api_version, kind)], where, errors)
        return
    typ = model_name(api_version, kind)
    if getattr(k8s, typ, None) is None:
        errors.append(f"{where}: no schema for {api_version} {kind}")
        return
    found = []
    check_value(doc, typ, where, found)
    if not found:  # the models read only well-typed objects
        check_required(doc, typ, where, found)
    errors.extend(found)


LWS_TEMPLATE = {"size": 2, "restartPolicy": "None",
                "workerTemplate": {"metadata": {"labels": {"a": "b"}},
                                   "spec": {"containers": [{"name": "c", "image": "i"}]}}}


def lws(**spec):
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "l"},
            "spec": spec}


def self_test():
    """Manifests with known mistakes must each be caught, and a valid one pass."""
    good = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 50051, "targetPort": "grpc"}], "selector": {"app": "x"}}}
    bad = [
        dict(good, spec={"ports": [{"port": 50051}], "selectr": {"app": "x"}}),  # a misspelt field
        dict(good, spec={"ports": [{"port": "50051"}]}),                         # a port as a string
        dict(good, spec={"ports": [{"targetPort": 1}]}),                         # port is required
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
         "spec": {"containers": [{"name": "c", "image": "i", "livenessProbe": {"grpc": {"service": "x"}}}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
         "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": [1]}}}]}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
         "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i",
                                                         "resources": {"limits": "64Gi"}}]}}}},  # no selector
        lws(leaderWorkerTemplates=LWS_TEMPLATE),                         # a misspelt field of the CRD
        lws(leaderWorkerTemplate=dict(LWS_TEMPLATE, restartPolicy="Always")),  # a value the enum lacks
        lws(leaderWorkerTemplate={"size": 2}),                           # workerTemplate is required
        lws(leaderWorkerTemplate=dict(LWS_TEMPLATE, size="4")),          # size as a string
        lws(leaderWorkerTemplate={"workerTemplate": {"spec": {"containers": [{"image": "i"}]}}}),  # no name
        lws(leaderWorkerTemplate={"workerTemplate": {"spec": {"containers": [{"name": "c", "imag": "i"}]}}}),
    ]
    errors = []
    check_object(good, "self-test good", errors)
    if errors:
        sys.exit(f"check_k8s_schema: the checker refuses a valid Service: {errors}")
    check_object(lws(leaderWorkerTemplate=LWS_TEMPLATE), "self-test good LeaderWorkerSet", errors)
    if errors:
        sys.exit(f"check_k8s_schema: the checker refuses a valid LeaderWorkerSet: {errors}")
    for i, doc in enumerate(bad):
        found = []
        check_object(doc, f"self-test {i}", found)
        if not found:
            sys.exit(f"check_k8s_schema: the checker missed mistake {i}: {doc}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    self_test()
    errors, objects = [], 0
    for folder in map(pathlib.Path, sys.argv[1:]):
        for path in sorted(folder.glob("*.yaml")):
            for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
                if doc is None:
                    continue
                objects += 1
                check_object(doc, f"{path.name}#{i}", errors, folder)
    for e in errors:
        print(e)
    print(f"check_k8s_schema: {objects} objects, {len(errors)} errors")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
