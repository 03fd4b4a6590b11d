"""The collectives and process-set lifecycle on 4 ranks, under each backend:
Gloo through horarun, MPI through horarun --mpi (mpirun)."""


def test_every_collective_on_every_set(run_worker):
    result = run_worker("collectives.py")
    for label, count in (("global", 4), ("even", 2), ("odd", 2), ("upper", 3), ("solo", 1)):
        assert result.stdout.count(f"set {label} ok") == count, result.stdout


def test_rank_in_two_sets_in_different_orders(run_worker):
    assert run_worker("two_sets.py").stdout.count("done") == 4


def test_errors_are_clear_and_never_hang(run_worker):
    assert run_worker("errors.py").stdout.count("done") == 4


def test_init_process_sets_get_ids_in_order(run_worker):
    assert run_worker("init_sets.py").stdout.count("done") == 4


def test_creating_a_set_involves_only_its_members(run_worker, tmp_path):
    result = run_worker("member_only.py", args=[str(tmp_path)])
    assert result.stdout.count("pair created and used") == 2, result.stdout
    assert result.stdout.count("own set done") == 2, result.stdout


def test_process_sets_are_checked_on_every_rank_and_duplicates_refused(run_worker):
    assert run_worker("set_validation.py").stdout.count("done") == 4
