// parasim._core: placeholder module until the kernels land.
#include <pybind11/pybind11.h>
namespace py = pybind11;
PYBIND11_MODULE(_core, m) { m.doc() = "parasim C++ core"; }
