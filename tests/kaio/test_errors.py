from kaio.errors import KaioCompileError, KaioLaunchError, KaioMemoryError, KaioTargetError


def test_compile_error_points_at_the_source():
    err = KaioCompileError(
        "type mismatch: f16 + f32",
        filename="k.py",
        line=7,
        col=11,
        end_col=16,
        source_line="    y[i] = a + b\n",
        hint="cast one side: f32(a)",
    )
    lines = str(err).splitlines()
    assert lines[0] == "k.py:7:12: error: type mismatch: f16 + f32"
    assert lines[1] == "        y[i] = a + b"
    assert lines[2] == "    " + " " * 11 + "^^^^^"
    assert lines[3] == "hint: cast one side: f32(a)"


def test_target_error_names_feature_and_sm():
    err = KaioTargetError("cp.async", 80, "sm_75")
    assert "cp.async" in str(err) and "sm_80" in str(err) and "sm_75" in str(err)


def test_launch_error_carries_log_and_path():
    err = KaioLaunchError("JIT failed", log="line 3: syntax error", ptx_path="/x/k.ptx")
    assert "syntax error" in str(err) and "/x/k.ptx" in str(err)


def test_memory_error_names_everything():
    err = KaioMemoryError(
        "out-of-bounds store", kernel="k", ptx_line=12, thread=(3, 0, 0), block=(1, 0, 0), address=0x100
    )
    text = str(err)
    for part in ("'k'", "line 12", "(3, 0, 0)", "(1, 0, 0)", "0x100"):
        assert part in text
