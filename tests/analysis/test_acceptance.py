"""The acceptance vocabulary's definitions (specviz.analysis.acceptance), each against counts done by hand."""

import pytest

from specviz.analysis import acceptance
from specviz.analysis.analytic import expected_accepted

# Four drafts of k = 3: (drafted, accepted) = (3, 3), (3, 0), (3, 1), (3, 2): 6 accepted of 12 drafted.
DRAFTS = [(3, 3), (3, 0), (3, 1), (3, 2)]


def test_acceptance_rate_is_accepted_over_drafted_and_undefined_without_drafts():
    assert acceptance.acceptance_rate(6, 12) == 0.5
    assert acceptance.acceptance_rate(0, 0) is None and acceptance.acceptance_rate(0, 0, empty=0.0) == 0.0


def test_mean_acceptance_length_counts_the_recovered_or_bonus_token():
    assert acceptance.mean_accepted(6, 4) == 1.5
    assert acceptance.mean_acceptance_length(6, 4) == 2.5  # (4 + 1 + 2 + 3) output tokens / 4 drafts
    assert acceptance.mean_acceptance_length(0, 0) is None and acceptance.mean_acceptance_length(0, 0, empty=1.0) == 1.0


def test_positions_tried_stop_at_the_first_rejection():
    assert [acceptance.positions_tried(d, a) for d, a in DRAFTS] == [3, 1, 2, 3]
    assert acceptance.positions_tried(0, 0) == 0


def test_alpha_is_accepted_over_positions_tried_and_sits_above_the_acceptance_rate():
    tried = sum(acceptance.positions_tried(d, a) for d, a in DRAFTS)
    assert acceptance.alpha(6, tried) == 6 / 9
    assert acceptance.alpha(6, tried) > acceptance.acceptance_rate(6, 12)
    assert acceptance.alpha(0, 0) is None and acceptance.alpha(0, 0, empty=0.6) == 0.6


def test_positions_tried_from_per_position_counts_match_the_drafts_own_when_every_draft_had_k_tokens():
    accepted_at = [sum(a >= j for _, a in DRAFTS) for j in (1, 2, 3)]  # [3, 2, 1]
    assert acceptance.positions_tried_from_counts(len(DRAFTS), accepted_at) == 9 == sum(
        acceptance.positions_tried(d, a) for d, a in DRAFTS)


def test_acceptance_per_position_over_all_drafts_or_over_those_that_reached_the_position():
    assert acceptance.acceptance_per_position([3, 2, 1], 4) == [0.75, 0.5, 0.25]
    assert acceptance.acceptance_per_position([3, 1], [4, 2]) == [0.75, 0.5]  # two drafts stopped after 1 token
    assert acceptance.acceptance_per_position([0], [0]) == [None]


def test_wasted_draft_share_is_one_less_the_acceptance_rate():
    assert acceptance.wasted_draft_share(6, 12) == 0.5 and acceptance.wasted_draft_share(2, 8) == 0.75
    assert acceptance.wasted_draft_share(0, 0) is None


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 0.95])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_alpha_from_accepted_inverts_the_expected_accepted_count(alpha, k):
    assert acceptance.alpha_from_accepted(expected_accepted(alpha, k), k) == pytest.approx(alpha, abs=1e-6)
    assert acceptance.alpha_from_accepted(1.0, 0) == 0.0  # nothing drafted: no acceptance to fit
