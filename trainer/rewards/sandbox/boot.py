"""The trusted bootstrap: Python source run first in the test process (``python -I -c _BOOT``).

It reads the program from an inherited descriptor, sets the rlimits, installs the audit hook
(the in-process second layer; see the package docstring) and runs the program as ``__main__``.
argv[1] is a JSON object of limits and paths (``judge.Sandbox._spawn``)."""

_BOOT = r'''
import os, sys, json, resource
def _boot():
    p = json.loads(sys.argv[1])
    with os.fdopen(p["src_fd"], "rb") as f:
        src = f.read()
    sys.argv = ["<program>"]
    R = resource
    lim = [(R.RLIMIT_CPU, (p["cpu"], p["cpu"] + 1)), (R.RLIMIT_AS, (p["as"], p["as"])),
           (R.RLIMIT_FSIZE, (p["fsize"], p["fsize"])), (R.RLIMIT_NOFILE, (p["nofile"], p["nofile"])),
           (R.RLIMIT_CORE, (0, 0))]
    if p["nproc"] is not None:
        lim.append((R.RLIMIT_NPROC, (p["nproc"], p["nproc"])))
    for what, val in lim:
        R.setrlimit(what, val)
    if p["guard"]:
        _guard(p["scratch"], tuple(p["read_roots"]))
    ru = R.getrusage(R.RUSAGE_SELF)
    os.write(p["rep_fd"], repr(ru.ru_utime + ru.ru_stime).encode())
    os.close(p["rep_fd"])
    return compile(src, "<program>", "exec")

def _private_realpath():
    # posixpath.realpath with private globals: a copy of posixpath's functions whose builtins,
    # os and stat are frozen as they are now, so the program cannot rebind what it calls.
    import builtins, posixpath, stat, types
    g = dict(vars(posixpath))
    g["__builtins__"] = dict(vars(builtins))
    g["os"] = types.SimpleNamespace(**vars(os))
    g["stat"] = types.SimpleNamespace(**vars(stat))
    for k, v in list(g.items()):
        if type(v) is types.FunctionType:
            f = types.FunctionType(v.__code__, g, v.__name__, v.__defaults__, v.__closure__)
            f.__kwdefaults__ = v.__kwdefaults__
            g[k] = f
    return g["realpath"]

def _guard(scratch, read_roots):
    # Everything the hook calls is bound here, at install time: rebinding builtins.isinstance,
    # os.fsdecode or posixpath functions later does not change what the hook sees.
    _isinstance, _type, _hasattr, _Exception = isinstance, type, hasattr, Exception
    _str, _bytes, _int = str, bytes, int
    _as_str, _startswith, _partition, _decode = str.__str__, str.startswith, str.partition, bytes.decode
    _str_repr, _int_repr = str.__repr__, int.__repr__
    _fspath, _write, _exit = os.fspath, os.write, os._exit
    _enc = sys.getfilesystemencoding()
    _real = _private_realpath()
    W = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    def text(a):  # an exact str for a path argument (str/bytes subclasses copied, not asked)
        if not _isinstance(a, (_str, _bytes)):
            a = _fspath(a)
        return _as_str(a) if _isinstance(a, _str) else _decode(a, _enc, "surrogateescape")
    def roots_of(roots):
        return tuple((r, r if r.endswith("/") else r + "/") for r in roots)
    def inside(path, roots):
        if _isinstance(path, _int):
            return True  # an already open descriptor (0, 1, 2 or one it opened legally)
        try:
            rp = _real(text(path))
        except _Exception:
            return False
        for r, rs in roots:
            if rp == r or _startswith(rp, rs):
                return True
        return False
    def shown(a):  # the blocked argument, without calling the program's own __repr__
        if _isinstance(a, (_str, _bytes)):
            return _str_repr(text(a))
        if _isinstance(a, _int):
            return _int_repr(a)
        return "<" + _as_str(_type(a).__name__) + ">"
    def stop(event, args):
        msg = "sandbox: blocked %s (%s)\n" % (event, ", ".join(shown(a) for a in args[:2]))
        _write(2, msg[:500].encode("utf-8", "replace"))
        _exit(86)
    W_EVENTS = {"os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link",
                "os.chmod", "os.chown", "os.utime", "os.truncate", "os.chdir", "os.chflags",
                "os.lchflags", "os.setxattr", "os.removexattr", "shutil.rmtree"}
    R_EVENTS = {"os.listdir", "os.scandir", "os.getxattr", "os.listxattr", "glob.glob"}
    DENY = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
            "os.kill", "os.killpg", "os.startfile", "subprocess.Popen", "pty.spawn",
            "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.remote_exec"}
    DENY_PREFIX = ("socket.", "ctypes.", "_ctypes", "winreg.")
    # gc itself stays importable (gc.disable() is a common speed idiom); its object walks do not.
    DENY_MOD = {"ctypes", "_ctypes", "_posixsubprocess", "multiprocessing", "_multiprocessing",
                "_xxsubinterpreters", "_interpreters", "cffi", "_socket", "socket", "ssl", "_ssl", "pty"}
    scratch = roots_of((_real(scratch),))
    allowed_read = scratch + roots_of(("/dev/null", "/dev/urandom") + read_roots)
    def pathy(a):
        return _isinstance(a, (_str, _bytes)) or _hasattr(_type(a), "__fspath__")
    def hook(event, args):
        if event == "open":
            path, flags = args[0], args[2]
            if _isinstance(flags, _int) and flags & W:
                if not inside(path, scratch):
                    stop(event, args)
            elif not inside(path, allowed_read):
                stop(event, args)
        elif event == "import":
            if _partition(_as_str(args[0]), ".")[0] in DENY_MOD:
                stop(event, args)
        elif event in DENY or _startswith(event, DENY_PREFIX):
            stop(event, args)
        elif event in W_EVENTS:
            for a in args[:2]:
                if pathy(a) and not inside(a, scratch):
                    stop(event, args)
        elif event in R_EVENTS:
            a = args[0] if args else "."
            if pathy(a) and not inside(a, allowed_read):
                stop(event, args)
    sys.addaudithook(hook)

_code = _boot()
_main = type(sys)("__main__")  # a clean __main__: the program sees none of the bootstrap's names
_main.__builtins__ = __builtins__
sys.modules["__main__"] = _main
exec(_code, _main.__dict__)
'''

