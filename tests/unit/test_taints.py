import pytest

from karpenter_core.scheduling.taints import Taint, Toleration, untolerated

TAINT = Taint("dedicated", "gpu", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (Toleration("dedicated", "Equal", "gpu", "NoSchedule"), True),
        (Toleration("dedicated", "Equal", "gpu", ""), True),
        (Toleration("dedicated", "Exists", "", ""), True),
        (Toleration("", "Exists", "", ""), True),
        (Toleration("dedicated", "Equal", "cpu", "NoSchedule"), False),
        (Toleration("dedicated", "Equal", "gpu", "NoExecute"), False),
        (Toleration("other", "Exists", "", ""), False),
        (Toleration("", "Equal", "gpu", ""), False),
    ],
)
def test_toleration_matching(toleration, tolerated):
    assert toleration.tolerates(TAINT) is tolerated


def test_prefer_no_schedule_taints_count_until_relaxed():
    prefer = Taint("soft", "", "PreferNoSchedule")
    assert untolerated([prefer], []) == prefer
    assert untolerated([prefer], [Toleration(operator="Exists", effect="PreferNoSchedule")]) is None
