import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from salience.parallel.memory import reuse_freed_memory
    took = reuse_freed_memory() if sys.argv[1] == "reuse" else None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(40):  # shard after shard: a few 8 MB arrays filled, then freed together
        arrays = [np.ones(1 << 20) for _ in range(4)]
        del arrays
    print(took, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_freed_arrays_are_reused_instead_of_faulted_in_again():
    took, reused = _faults("reuse")
    if took != "True":
        pytest.skip("this C library has no mallopt (not glibc): the setting is a no-op")
    _, fresh = _faults("fresh")
    # 4 arrays of 2,048 pages each round: glibc gives the heap's top back to the system when
    # they are freed together and faults it in again the next round; kept, it is faulted once
    assert fresh > 40 * 1000
    assert reused < fresh / 10, (reused, fresh)
