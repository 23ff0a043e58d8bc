#!/usr/bin/env bash
# libfp4kit without the vendor libraries: (1) the shared library names none of the CUDA runtime,
# cuBLAS/cuBLASLt or cuDNN among the libraries it needs (readelf -d); (2) a program linked to it starts
# with those libraries hidden, and the vendor backends say which file was not found (vendor_libs.c);
# (3) so does `import fp4kit` in Python when numpy is there. Hiding: the dynamic loader is run by
# hand with --inhibit-cache, and the library path holds only the system's own directories, so
# libraries found through ld.so.cache or LD_LIBRARY_PATH (the CUDA toolkit's) are not seen.
# Usage: run.sh <libfp4kit.so> <vendor_libs program> <python source dir>
set -euo pipefail
lib=$1 prog=$2 pysrc=$3
fail=0

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "libfp4kit needs: $(echo $needed)"
if echo "$needed" | grep -E 'cudart|cublas|cudnn'; then
  echo "FAIL: libfp4kit.so links a vendor library (above); they must be opened at first use"
  fail=1
fi

ldso=$(readelf -l "$prog" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
# The directories of the C library and of the program's other system dependencies, never the CUDA
# toolkit's.
sysdirs=$(ldd "$lib" | awk '/=> \//{print $3}' | grep -v -E 'cuda|cudnn|cublas' | xargs -r -n1 dirname | sort -u | paste -sd:)
libdir=$(dirname "$lib")
echo "running with only $sysdirs:$libdir"
set +e
"$ldso" --inhibit-cache --library-path "$sysdirs:$libdir" "$prog"
rc=$?
set -e
if [ $rc -eq 77 ]; then skip=1; elif [ $rc -ne 0 ]; then echo "FAIL: vendor_libs exited $rc"; fail=1; fi

py=$(command -v python3 || true)
if [ -n "$py" ] && "$py" -c "import numpy" 2>/dev/null; then
  pyexe=$("$py" -c "import sys; print(sys.executable)")
  pylibs=$(ldd "$pyexe" | awk '/=> \//{print $3}' | xargs -r -n1 dirname | sort -u | paste -sd:)
  numpylibs=$("$py" -c "import numpy, os; d = os.path.join(os.path.dirname(numpy.__file__), '..', 'numpy.libs'); print(os.path.abspath(d))")
  # Run by the loader, Python cannot find its prefix from its own path: say it.
  pyhome=$("$py" -c "import sys; print(sys.base_prefix)")
  pypath=$("$py" -c "import site, sys; print(':'.join([p for p in sys.path if p]))")
  set +e
  out=$(FP4KIT_LIB="$lib" PYTHONHOME="$pyhome" PYTHONPATH="$pysrc:$pypath" "$ldso" --inhibit-cache --library-path "$sysdirs:$pylibs:$numpylibs:$libdir" "$pyexe" -c "
import fp4kit
for b in fp4kit.backends():
    if b['name'] in ('cpu', 'cublaslt', 'cudnn'):
        print('  %-10s %s: %s' % (b['name'], 'available' if b['available'] else 'unavailable', b['reason']))
print('import fp4kit: ok')
" 2>&1)
  prc=$?
  set -e
  echo "$out"
  if [ $prc -ne 0 ]; then echo "FAIL: import fp4kit with the vendor libraries hidden"; fail=1; fi
else
  echo "python3 with numpy not found: the import check is skipped"
fi
[ $fail -ne 0 ] && exit 1
[ "${skip:-0}" = 1 ] && exit 77
echo "vendor libraries: 0 failures"
