# Source: skypilot-org/skypilot, tests/skyserve/restart/user_bug.py, commit 277ba7a2022525d5919db5f2be3dbd460d30355c
import time

# The program exits to simulate a user app bug.
if __name__ == "__main__":
    time.sleep(1)
    assert False
