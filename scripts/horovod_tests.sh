#!/usr/bin/env bash
# Runs one of Horovod's own test suites on hora through the `horovod`
# compatibility package, at each rank count and on each backend, and prints
# one summary line per run (from the JUnit reports that every rank writes):
# torch (test/parallel/test_torch.py, the default), tensorflow
# (test/parallel/test_tensorflow.py as Horovod ships it: each test in
# TensorFlow 1 graph mode and eagerly) or keras
# (test/parallel/test_tensorflow2_keras.py). --legacy-keras runs the
# TensorFlow suites with tf.keras as Keras 2 (TF_USE_LEGACY_KERAS=1; needs
# tf_keras, which scripts/setup.sh installs) instead of Keras 3.
#
#   scripts/horovod_tests.sh HOROVOD_CHECKOUT [--suite torch|tensorflow|keras] [--legacy-keras]
#                            [--np "2 4"] [--backends "gloo mpi"] [-- PYTEST_ARGS...]
#
# HOROVOD_CHECKOUT is a directory holding Horovod's test/parallel and
# test/utils. Nothing from it is copied into this repository: the tests run
# from a scratch directory under build/horovod-tests, where the reports stay.
# Needs the build (`make build`); installs the compatibility package and the
# test suite's own dependencies (mock, packaging, parameterized) into .venv.
# With PYTHON set, runs the tests with that interpreter instead and installs
# nothing: it must import hora, horovod and those dependencies already (say
# PYTHONPATH=build/site:compat/horovod with another build of hora).
#
# A test that fails for a reason that fails it on Horovod as well (listed in
# EXPECTED below and in docs/compat.md) counts as an expected failure only
# when its error message shows that reason; so does a test of a feature hora
# does not have (UNSUPPORTED, also listed there), counted apart. Any other
# failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
INSTALL=1
if [ -n "${PYTHON:-}" ]; then INSTALL=0; else PYTHON="$REPO/.venv/bin/python"; fi

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
CHECKOUT=$1; shift
NPS="2 4"
BACKENDS="gloo mpi"
SUITE=torch
LABEL_SUFFIX=
while [ $# -gt 0 ]; do
  case $1 in
    --suite) SUITE=$2; shift 2 ;;
    --legacy-keras) export TF_USE_LEGACY_KERAS=1; LABEL_SUFFIX=-keras2; shift ;;
    --np) NPS=$2; shift 2 ;;
    --backends) BACKENDS=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "horovod_tests: unknown option $1" >&2; usage ;;
  esac
done
case $SUITE in
  torch) TEST_FILE=test_torch.py ;;
  tensorflow) TEST_FILE=test_tensorflow.py ;;
  keras) TEST_FILE=test_tensorflow2_keras.py ;;
  *) echo "horovod_tests: unknown suite $SUITE" >&2; usage ;;
esac
for part in "test/parallel/$TEST_FILE" test/utils/common.py; do
  [ -f "$CHECKOUT/$part" ] || { echo "horovod_tests: $CHECKOUT has no $part" >&2; exit 2; }
done
[ -x "$PYTHON" ] || [ "$INSTALL" = 0 ] || { echo "horovod_tests: no .venv; run make build first" >&2; exit 2; }

if [ "$INSTALL" = 1 ]; then
  "$PYTHON" -m pip install -q --no-deps ./compat/horovod
  "$PYTHON" -m pip install -q mock packaging parameterized
fi

WORK="$REPO/build/horovod-tests"
rm -rf "$WORK/test"
mkdir -p "$WORK/test"
cp -r "$CHECKOUT/test/parallel" "$CHECKOUT/test/utils" "$WORK/test/"

status=0
for backend in $BACKENDS; do
  for np in $NPS; do
    out="$WORK/$SUITE$LABEL_SUFFIX-$backend-np$np"
    rm -rf "$out" && mkdir -p "$out"
    launcher=()
    [ "$backend" = mpi ] && launcher=(--mpi)
    # Each rank writes its own report; the rank comes from the launcher's
    # environment. The reports, not the exit status, decide the outcome.
    (cd "$WORK/test/parallel" &&
      timeout 3600 "$PYTHON" -m hora.runner.launch "${launcher[@]}" -np "$np" bash -c \
        'exec "$0" -m pytest -q -p no:cacheprovider --junitxml="$1/rank-${HOROVOD_RANK:-${OMPI_COMM_WORLD_RANK:-0}}.xml" "$2" "${@:3}"' \
        "$PYTHON" "$out" "$TEST_FILE" "$@" >"$out/output.log" 2>&1) ||
      echo "$SUITE$LABEL_SUFFIX $backend np=$np: horarun exited with status $? (pytest exits 1 for any failure, expected ones too)"
    "$PYTHON" - "$SUITE" "$backend" "$np" "$out" "$LABEL_SUFFIX" <<'PY' || status=1
import glob, sys
import xml.etree.ElementTree as ET
suite, backend, np, out, suffix = sys.argv[1:]
reports = sorted(glob.glob(f"{out}/rank-*.xml"))
if len(reports) != int(np):
    print(f"{backend} np={np}: {len(reports)} of {np} ranks wrote a report; see {out}/output.log")
    sys.exit(1)
# Tests that fail on Horovod too, with the framework versions installed here:
# name -> (text their error must contain, why). The torch ones build every
# torch.optim optimizer for a model with 1-D parameters (biases), and torch
# 2.13's Muon refuses those; the TensorFlow ones use what TensorFlow 2.21 and
# Keras 3 removed.
MUON = ("Muon only supports 2D parameters", "torch 2.13's Muon optimizer refuses the test model's 1-D parameters")
REF = ("object has no attribute 'ref'", "Keras 3 variables have no ref(), by which the test keys gradients")
PRODUCT_FP16 = ("from 4 ranks on, the test's float16 products of four values in [-100, 100] "
                "overflow to inf in the result and in its reference alike, and inf - inf is nan, which fails its "
                "comparison before the later dtypes run (at 2 or 3 ranks it asks for exact results and passes)")
EXPECTED = {
    "torch": {"test_broadcast_state": MUON, "test_broadcast_state_options": MUON, "test_force_allreduce": MUON},
    "tensorflow": {
        "test_horovod_syncbn_cpu": ("passed to BatchNormalization: {'fused'",
                                    "Keras 3's BatchNormalization has no fused= (the test's reference layer uses it)"),
        "test_partial_distributed_gradient_tape": REF,
        # At 4 ranks or more; they pass at 2 and 3.
        "test_horovod_allreduce_product_cpu": ("hvd.allreduce produces incorrect results for product", PRODUCT_FP16),
        "test_horovod_grouped_allreduce_product_cpu": ("hvd.grouped_allreduce produces incorrect results",
                                                       PRODUCT_FP16),
    },
    "keras": {
        "test_broadcast_global_variables_callback_with_local_vars": REF,
        "test_partial_distributed_optimizer": REF,
        **{name: ("missing 1 required positional argument: 'learning_rate'",
                  "Keras 3 optimizers need learning_rate=; the test's Optimizer subclass passes none and "
                  "implements Keras 2's update_step(gradient, variable)")
           for name in ("test_gradient_aggregation_0", "test_gradient_aggregation_1",
                        "test_gradient_aggregation_with_local_vars_0", "test_gradient_aggregation_with_local_vars_1")},
        "test_legacy_optimizer": ("optimizers.legacy` is not supported in Keras 3",
                                  "Keras 3 has no keras.optimizers.legacy"),
        "test_sparse_as_dense": ("not recognized: {'lr'", "Keras 3 optimizers take learning_rate=, not lr="),
        "test_sparse_as_dense_with_grad_aggregation": ("not recognized: {'lr'",
                                                       "Keras 3 optimizers take learning_rate=, not lr="),
        "test_train_model_lr_schedule": ("has no attribute 'mean_squared_error'",
                                         "Keras 3's tf.keras.losses has no mean_squared_error (the test also uses "
                                         "ThresholdedReLU, compile(experimental_run_tf_function=) and optimizer.lr, "
                                         "all removed)"),
    },
}[suite]
# Tests of features hora does not have (yet): name -> (text, what). None now.
UNSUPPORTED = {}
bad = 0
for path in reports:
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "expected": 0, "unsupported": 0}
    problems = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        kind = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(getattr(outcome, "tag", ""), "passed")
        name = case.get("name")
        text = "" if outcome is None else (outcome.get("message") or "") + (outcome.text or "")
        if kind == "failed" and name in EXPECTED and EXPECTED[name][0] in text:
            kind = "expected"
            problems.append(f"{name} (expected failure: {EXPECTED[name][1]})")
        elif kind == "failed" and name in UNSUPPORTED and UNSUPPORTED[name][0] in text:
            kind = "unsupported"
            problems.append(f"{name} (not supported: {UNSUPPORTED[name][1]})")
        elif kind in ("failed", "error"):
            problems.append(f"{name} ({kind}: {(outcome.get('message') or '').splitlines()[0][:200] if outcome.get('message') else ''})")
        counts[kind] += 1
    rank = path.rsplit("-", 1)[1].split(".")[0]
    print(f"{suite}{suffix} {backend} np={np} rank {rank}: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['error']} errors, {counts['skipped']} skipped, {counts['expected']} expected failures, "
          f"{counts['unsupported']} unsupported")
    for problem in problems:
        print(f"    {problem}")
    bad += counts["failed"] + counts["error"]
sys.exit(1 if bad else 0)
PY
  done
done
exit $status
