"""The machine in one line, as pytest's header prints it (tests/conftest.py), from launch/machine.py's description."""


def machine_line(m: dict) -> str:
    return (
        f"CPU {m['cpu']}, {m['cores']} core(s) usable of {m['cores_total']} "
        f"({m.get('physical_cores') or '?'} physical, {m.get('threads_per_core') or '?'} thread(s) each), native bf16: "
        f"{'yes' if m['native_bf16'] else 'no'}, GPU: {m['gpu'] or 'none'}; "
        f"torch {m['torch']}"
    )
