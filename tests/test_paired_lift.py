"""What RL did, paired task by task (algos/evaluation.py): Newcombe's interval for a difference of paired
proportions, the t interval over tasks played several times, and the record a run keeps for it."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from algos.evaluation import Lift, newcombe_paired, outcomes, paired_lift


def reference_newcombe(table: list[list[int]], z: float = 1.96) -> tuple[float, float]:
    """A port of the biostatUZH R function confIntPairedProportion (Newcombe 1998, as Altman's "Statistics
    with confidence" works it), kept in its own shape: table[0][0] both positive, table[0][1] the first
    positive only, table[1][0] the second only, table[1][1] neither; the interval of p1 - p2."""
    r, s, t, u = table[0][0], table[0][1], table[1][0], table[1][1]
    n = r + s + t + u
    p1, p2 = (r + s) / n, (r + t) / n

    def wilson(x: int) -> tuple[float, float]:
        p = x / n
        mid = 2 * n * p + z**2
        spread = z * math.sqrt(z**2 + 4 * n * p * (1 - p))
        return (mid - spread) / (2 * (n + z**2)), (mid + spread) / (2 * (n + z**2))

    (l1, u1), (l2, u2) = wilson(r + s), wilson(r + t)
    phi = 0.0
    big = (r + s) * (t + u) * (r + t) * (s + u)
    if big > 0:
        b = r * u - s * t
        c = b - n / 2 if b > n / 2 else (b if b < 0 else 0)
        phi = c / math.sqrt(big)
    d = p1 - p2
    lower = d - math.sqrt((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2)
    upper = d + math.sqrt((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2)
    return lower, upper


def pairs(both: int, only_before: int, only_after: int, neither: int) -> tuple[list[bool], list[bool]]:
    before = [True] * both + [True] * only_before + [False] * only_after + [False] * neither
    after = [True] * both + [False] * only_before + [True] * only_after + [False] * neither
    return before, after


def test_newcombe_by_hand_when_no_task_is_won_before():
    """4 tasks, 2 won after RL only, none before: p_before = 0, p_after = 0.5, phi = 0 (a margin is 0).
    Wilson(0 of 4) = [0, 0.4899], Wilson(2 of 4) = [0.1500, 0.8500]; low = 0.5 - sqrt(0.35^2 + 0.4899^2)
    = -0.1021, high = 0.5 + sqrt(0.35^2 + 0^2) = 0.8500."""
    diff, low, high = newcombe_paired(*pairs(0, 0, 2, 2))
    assert diff == 0.5
    assert low == pytest.approx(-0.1021, abs=1e-4) and high == pytest.approx(0.8500, abs=1e-4)


def test_newcombe_on_altmans_table_matches_the_reference_port():
    """Respiratory symptoms at 12 and at 14 years in 1319 children: 212 both, 144 at 12 only, 256 at 14 only."""
    diff, low, high = newcombe_paired(*pairs(212, 144, 256, 707))
    assert diff == pytest.approx(112 / 1319)
    ref_low, ref_high = reference_newcombe([[212, 256], [144, 707]])  # p1: at 14 (after), p2: at 12 (before)
    assert (low, high) == pytest.approx((ref_low, ref_high), abs=1e-12)
    assert (round(low, 3), round(high, 3)) == (0.055, 0.114)


counts = st.integers(0, 40)


@given(counts, counts, counts, counts)
def test_newcombe_agrees_with_the_port_and_keeps_its_shape(both, only_before, only_after, neither):
    n = both + only_before + only_after + neither
    if n == 0:
        return
    before, after = pairs(both, only_before, only_after, neither)
    diff, low, high = newcombe_paired(before, after)
    ref = reference_newcombe([[both, only_after], [only_before, neither]])
    assert (low, high) == pytest.approx(ref, abs=1e-9)
    assert -1.0 - 1e-9 <= low <= diff <= high <= 1.0 + 1e-9
    assert high > low  # never a zero-width interval, even when no pair differs
    back = newcombe_paired(after, before)  # the other way round: the mirror image
    assert back == pytest.approx((-diff, -high, -low), abs=1e-12)


def test_one_episode_per_task_is_newcombe_in_points():
    before = {10: [False], 11: [False], 12: [True], 13: [False]}
    after = {10: [True], 11: [True], 12: [True], 13: [False], 99: [True]}  # task 99: not played before, not paired
    lift = paired_lift(before, after)
    diff, low, high = newcombe_paired([False, False, True, False], [True, True, True, False])
    assert lift == Lift(100 * diff, 100 * low, 100 * high, tasks=4, episodes=4, method="newcombe")
    assert lift.points == 50.0
    assert lift.line("RL's lift over the warm-up").startswith("RL's lift over the warm-up: +50.0 points, 95 % interval [")
    assert lift.line("x").endswith("(4 held-out tasks, one episode each before and after)")
    assert lift.metrics("eval/rl_lift") == {"eval/rl_lift": lift.points, "eval/rl_lift_low": lift.low,
                                            "eval/rl_lift_high": lift.high}  # fmt: skip
    assert paired_lift({1: [True]}, {2: [True]}) is None  # no task played by both


def test_several_episodes_per_task_are_a_t_interval_over_tasks():
    """Per-task differences of success rates: +100, 0, +50 points; mean 50, sample std 50, t(2) = 4.303:
    half-width 4.303 x 50 / sqrt(3) = 124.2."""
    before = {1: [False, False], 2: [True, False], 3: [False, False]}
    after = {1: [True, True], 2: [True, False], 3: [False, True]}
    lift = paired_lift(before, after)
    assert (lift.method, lift.tasks, lift.episodes, lift.points) == ("t", 3, 6, 50.0)
    assert (lift.low, lift.high) == pytest.approx((50 - 124.21, 50 + 124.21), abs=0.01)
    assert lift.line("lift over warm").endswith("(3 held-out tasks, 2 episodes each before and after)")


def test_outcomes_are_each_tasks_episodes_in_play_order():
    from algos.collector import Step, Trajectory

    def traj(traj_id: int, seed: int, won: bool) -> Trajectory:
        step = Step(group_id=0, traj_id=traj_id, t=0, state_key="s", observation="o", prompt_ids=[1], response_ids=[2],
                    rollout_logprobs=[-0.1], response="a", action="a", parse_status="ok", action_valid=True,
                    reward=float(won), terminated=True, truncated=False, won=won)  # fmt: skip
        return Trajectory(0, traj_id, seed, "", [step])

    trajs = [traj(3, 7, True), traj(0, 5, False), traj(1, 7, False), traj(2, 5, True)]
    assert outcomes(trajs) == {5: [False, True], 7: [False, True]}


def test_the_loop_keeps_the_baseline_before_rl_through_a_checkpoint():
    """The evaluation at iteration 0 is the baseline; later ones move only the latest success; the loop's
    checkpoint entry keeps the baseline, so a resumed run still pairs its final evaluation with it."""
    from algos.distributed import SINGLE
    from algos.evaluation import HeldOut
    from algos.run import LoopState

    loop = LoopState()
    loop.evaluated(HeldOut({"eval/success_rate": 0.25}, {5: [True], 6: [False], 7: [False], 8: [False]}))
    loop.iteration = 3
    later = HeldOut({"eval/success_rate": 0.75}, {5: [True], 6: [True], 7: [True], 8: [False]})
    loop.evaluated(later)
    assert loop.held_out == 0.75 and loop.start == {5: [True], 6: [False], 7: [False], 8: [False]}
    again = LoopState.from_dict(3, loop.to_dict(SINGLE), SINGLE)
    assert again.start == loop.start
    assert again.lift(later) == loop.lift(later) and loop.lift(later).points == 50.0
    assert LoopState().lift(later) is None  # no evaluation before RL (--eval-episodes 0 then, or an old checkpoint)


def test_held_out_records_are_columns_per_evaluation_and_the_last_row_of_an_iteration_wins(tmp_path):
    """HeldOut.record: the episodes in play order as columns; read_held_out: one entry per iteration, the
    row a resumed run wrote again replaces the first, and a line cut by a kill is skipped."""
    from algos.evaluation import HeldOut
    from algos.run_dir import RunDir, read_held_out

    first = HeldOut({"eval/success_rate": 0.5}, {5: [True], 6: [False]}, ((5, True, 3), (6, False, 9)))
    assert first.record() == {"task": [5, 6], "won": [True, False], "steps": [3, 9]}
    run = RunDir(tmp_path, {"report_to": "none"})
    run.log_held_out(0, first.record())
    run.log_held_out(4, {"task": [5, 6], "won": [False, False], "steps": [9, 9]})
    run.log_held_out(4, {"task": [5, 6], "won": [True, True], "steps": [2, 2]})  # evaluated again after a resume
    run.close()
    with open(tmp_path / "held_out.jsonl", "a") as f:
        f.write('{"iteration": 8, "task": [5')  # a kill mid-write
    assert read_held_out(tmp_path) == {0: first.record(), 4: {"task": [5, 6], "won": [True, True], "steps": [2, 2]}}
    assert read_held_out(tmp_path / "none") == {}
