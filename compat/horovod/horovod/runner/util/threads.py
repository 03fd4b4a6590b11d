"""``horovod.runner.util.threads``: running a function on many argument lists
in threads, and starting one background thread."""

import queue
import threading


def execute_function_multithreaded(fn, args_list, block_until_all_done=True, max_concurrent_executions=1000):
    """Calls ``fn(*args)`` for every ``args`` in ``args_list``, on at most
    ``max_concurrent_executions`` threads at a time.

    With ``block_until_all_done`` it waits for every call and returns
    ``{index in args_list: result}``; a call that raised leaves its index
    out, and then RuntimeError is raised once all threads have finished.
    Otherwise it returns None at once and the (daemon) threads run on.
    """
    work = queue.Queue()
    for index, args in enumerate(args_list):
        work.put((index, list(args)))
    results = {}
    results_lock = threading.Lock()

    def call_until_no_work_is_left():
        while True:
            try:
                index, args = work.get_nowait()
            except queue.Empty:
                return
            result = fn(*args)
            with results_lock:
                results[index] = result

    thread_count = min(max_concurrent_executions, len(args_list))
    threads = [in_thread(call_until_no_work_is_left, daemon=not block_until_all_done)
               for _ in range(thread_count)]
    if not block_until_all_done:
        return None
    # Short joins, so that a signal (Ctrl-C) still reaches this thread.
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(0.1)
    if len(results) != len(args_list):
        raise RuntimeError(f"Some threads for func {getattr(fn, '__name__', fn)} did not complete successfully.")
    return results


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Starts ``target(*args)`` in a new thread and returns the thread.
    ``args`` must be a tuple (ValueError otherwise); with ``silent`` an
    exception from ``target`` is swallowed instead of reported."""
    if not isinstance(args, tuple):
        raise ValueError(f"args must be a tuple, not {type(args)}, for a single argument use (arg,)")
    run = target
    if silent:
        def run(*call_args):
            try:
                target(*call_args)
            except BaseException:
                pass
    thread = threading.Thread(target=run, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
