// parasim._core: NumPy buffers in, NumPy buffers out, the GIL released while kernels run.
// Arrays must already have the exact dtype, dimension count and be C-contiguous (no silent casts or
// copies): the Python wrappers in parasim.rewards / advantages / masks convert and validate, then call
// these. Scalars are checked here too: integers must be ints (a bool is refused), codes in range, floats
// floats, so that a direct call cannot reach a kernel with a value it does not define.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include "advantages.hpp"
#include "masks.hpp"
#include "rewards.hpp"

namespace py = pybind11;
using namespace parasim;

template <class T>
using Arr = py::array_t<T, py::array::c_style>;

namespace {

template <class T>
const T* ptr(const Arr<T>& a) { return a.data(); }
template <class T>
T* mut(Arr<T>& a) { return a.mutable_data(); }

void need_len(const py::array& a, int64_t n, const char* name, py::ssize_t ndim = 1) {
  if (a.ndim() != ndim || a.shape(0) != n) {
    std::ostringstream m;
    m << name << ": expected " << ndim << "-d with length " << n << ", got shape (";
    for (py::ssize_t d = 0; d < a.ndim(); ++d) m << a.shape(d) << (d + 1 < a.ndim() ? ", " : "");
    m << ")";
    throw py::value_error(m.str());
  }
}

template <class T>
std::string nonfinite_message(const char* name, const T* data, int64_t i) {
  std::ostringstream m;
  m << name << "[" << i << "] = " << static_cast<double>(data[i]) << ": must be finite";
  return m.str();
}

std::string repr_of(const py::handle& h) { return py::repr(h).cast<std::string>(); }

// An integer scalar: a Python int or NumPy integer in [lo, hi]. pybind11's int caster would take True as 1.
int64_t int_arg(const py::handle& h, const char* name, int64_t lo, int64_t hi) {
  if (PyBool_Check(h.ptr()) || !PyIndex_Check(h.ptr()))
    throw py::type_error(std::string(name) + " = " + repr_of(h) + ": must be an integer, not " +
                         py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>());
  py::int_ v = py::reinterpret_steal<py::int_>(PyNumber_Index(h.ptr()));
  if (!v) throw py::error_already_set();
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0 || x < lo || x > hi)
    throw py::value_error(std::string(name) + " = " + repr_of(h) + ": must be in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
  return x;
}

void check_real(const char* name, double v, double lo, bool lo_open) {
  if (!std::isfinite(v) || (lo_open ? !(v > lo) : !(v >= lo)))
    throw py::value_error(std::string(name) + " = " + repr_of(py::float_(v)) + ": must be finite and " +
                          (lo_open ? "> " : ">= ") + repr_of(py::float_(lo)));
}

AdvParams adv_params(const py::object& method, const py::object& scale, bool unbiased, double eps,
                     std::optional<double> clip, std::optional<double> min_std) {
  AdvParams p;
  p.method = static_cast<AdvMethod>(int_arg(method, "method", 0, 3));
  p.scale = static_cast<AdvScale>(int_arg(scale, "scale", 0, 2));
  p.unbiased = unbiased;
  check_real("eps", eps, 0.0, false);
  p.eps = eps;
  if (clip) check_real("clip", *clip, 0.0, true);
  p.has_clip = clip.has_value();
  p.clip = clip.value_or(0.0);
  if (min_std) check_real("min_std", *min_std, 0.0, false);
  p.has_min_std = min_std.has_value();
  p.min_std = min_std.value_or(0.0);
  return p;
}

template <class T, class I>
void advantages_binding(const Arr<T>& rewards, const Arr<I>& group_ids, std::optional<Arr<int32_t>> role_ids,
                        const py::object& method, const py::object& scale, bool unbiased, double eps,
                        std::optional<double> clip, std::optional<double> min_std, Arr<T>& out, Arr<uint8_t>& keep) {
  if (rewards.ndim() != 1) throw py::value_error("rewards: expected a 1-d array");
  const int64_t n = rewards.shape(0);
  need_len(group_ids, n, "group_ids");
  need_len(out, n, "out");
  need_len(keep, n, "keep");
  const int32_t* roles = nullptr;
  if (role_ids) {
    need_len(*role_ids, n, "role_ids");
    roles = role_ids->data();
  }
  const AdvParams p = adv_params(method, scale, unbiased, eps, clip, min_std);
  if (p.method == AdvMethod::kPerRole && roles == nullptr)
    throw py::value_error("role_ids: required by method 'per_role'");
  Status s;
  {
    py::gil_scoped_release release;
    s = group_advantages(ptr(rewards), ptr(group_ids), roles, n, p, mut(out), mut(keep));
  }
  if (s.code == Status::kNonFinite) throw py::value_error(nonfinite_message("rewards", ptr(rewards), s.index));
  if (s.code == Status::kOverflow) {
    std::ostringstream m;
    m << "rewards[" << s.index << "] = " << repr_of(py::float_(static_cast<double>(ptr(rewards)[s.index])))
      << ": its advantage overflows " << py::str(py::dtype::of<T>()).cast<std::string>() << " (|advantage| <= "
      << repr_of(py::float_(static_cast<double>(std::numeric_limits<T>::max())))
      << "); bound it with clip or rescale the rewards";
    throw py::value_error(m.str());
  }
  if (s.code == Status::kBadValue)
    throw py::value_error("role_ids: (number of groups) x (number of distinct roles) must fit in int64");
}

// The dict holds the arrays, so pointers into them stay valid; a wrong dtype or layout is an error here
// rather than a silent copy whose buffer would die with this function.
template <class T>
const T* field(const py::dict& a, const char* name, int64_t n, py::ssize_t ndim = 1) {
  if (!a.contains(name)) throw py::value_error(std::string("arrays: missing field ") + name);
  py::object obj = a[name];
  if (!py::isinstance<Arr<T>>(obj))
    throw py::type_error(std::string(name) + ": expected a C-contiguous array of dtype " +
                         py::str(py::dtype::of<T>()).cast<std::string>());
  auto arr = py::reinterpret_borrow<py::array>(obj);
  need_len(arr, n >= 0 ? n : (arr.ndim() > 0 ? arr.shape(0) : -1), name, ndim);
  return static_cast<const T*>(arr.data());
}

// The element type of a field's buffer pointer (visit_fields hands over `const T*&`).
template <class P>
using elem_t = std::remove_const_t<std::remove_pointer_t<std::remove_reference_t<P>>>;

BatchView batch_view(const py::dict& a) {
  BatchView b;
  field<double>(a, "outcome", -1);
  b.n = py::reinterpret_borrow<py::array>(a["outcome"]).shape(0);
  visit_fields(b, [&](const char* name, auto& ptr, int ndim) {
    ptr = field<elem_t<decltype(ptr)>>(a, name, b.n, ndim);
  });
  const py::ssize_t t = py::reinterpret_borrow<py::array>(a["tool_counts"]).shape(1);
  if (t < 1 || t > kMaxTools)
    throw py::value_error("tool_counts: expected shape (N, T) with 1 <= T <= " + std::to_string(kMaxTools) +
                          " tools, got T = " + std::to_string(t));
  b.num_tools = static_cast<int>(t);
  const py::ssize_t width = py::reinterpret_borrow<py::array>(a["preference"]).shape(1);
  if (width != t + 3)
    throw py::value_error("preference: expected shape (N, " + std::to_string(t + 3) + ") (the " + std::to_string(t) +
                          " tools of tool_counts, then outcome, cost, latency), got width " + std::to_string(width));
  return b;
}

// (name, dtype, ndim) of every trajectory field the core reads, in the order it lists them.
py::list trajectory_fields() {
  py::list out;
  BatchView b;
  visit_fields(b, [&](const char* name, auto& ptr, int ndim) {
    out.append(py::make_tuple(name, py::dtype::of<elem_t<decltype(ptr)>>(), ndim));
  });
  return out;
}

std::vector<std::string> reward_param_names(int64_t num_tools) {
  std::vector<std::string> names(std::begin(kRewardParamNames), std::end(kRewardParamNames));
  for (int64_t t = 0; t < num_tools; ++t) names.push_back("pref_tool_" + std::to_string(t));
  return names;
}

// Every parameter finite and the formula column one of the kernel's codes: score_config casts it to an int.
void check_reward_params(const Arr<double>& params, int num_tools) {
  const double* p = params.data();
  const int64_t width = param_width(num_tools);
  for (int64_t c = 0; c < params.shape(0); ++c) {
    for (int64_t j = 0; j < width; ++j) {
      const double v = p[c * width + j];
      const bool ok = std::isfinite(v) && (j != kFormula || (v >= 0 && v < kNumFormulas && v == std::floor(v)));
      if (!ok)
        throw py::value_error("params[" + std::to_string(c) + ", " + std::to_string(j) + "] (" +
                              reward_param_names(num_tools)[j] + ") = " + repr_of(py::float_(v)) +
                              ": must be finite" +
                              (j == kFormula ? " and a formula code in [0, " + std::to_string(kNumFormulas - 1) + "]"
                                             : ""));
    }
  }
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "parasim C++ core: batched rewards, group advantages and token loss masks over NumPy buffers";

  m.def("num_threads", &num_threads, "Threads the kernels use (PARASIM_NUM_THREADS or the hardware count).");

  m.def("reward_param_names", [](const py::object& num_tools) {
    return reward_param_names(int_arg(num_tools, "num_tools", 1, kMaxTools));
  }, py::arg("num_tools"), "Names of the columns of a reward parameter row for a batch of num_tools tools, in order.");
  m.def("reward_formulas", [] { return std::vector<std::string>(std::begin(kFormulaNames), std::end(kFormulaNames)); },
        "Names of the reward formula families, in the order of their codes (a parameter row's formula column).");
  m.def("reward_components", [] {
    return std::vector<std::string>(std::begin(kComponentNames), std::end(kComponentNames));
  }, "Names of the reward components, in the order of the comps output's rows (the total is their sum).");

  m.def("trajectory_fields", &trajectory_fields,
        "(name, dtype, ndim) of the trajectory fields score_rewards reads (parasim.trajectory_schema's core fields).");

  m.attr("max_tools") = kMaxTools;

  m.def("score_rewards", [](const py::dict& arrays, const Arr<double>& params, Arr<double>& totals,
                            std::optional<Arr<double>> comps) {
    const BatchView b = batch_view(arrays);
    const int64_t width = param_width(b.num_tools);
    if (params.ndim() != 2 || params.shape(1) != width)
      throw py::value_error("params: expected shape (C, " + std::to_string(width) + ") (" +
                            std::to_string(kNumFixedParams) + " parameters + one preference per tool, T = " +
                            std::to_string(b.num_tools) + ")");
    check_reward_params(params, b.num_tools);
    const int64_t C = params.shape(0);
    if (totals.ndim() != 2 || totals.shape(0) != C || totals.shape(1) != b.n)
      throw py::value_error("totals: expected shape (C, N)");
    double* cp = nullptr;
    if (comps) {
      if (C != 1 || comps->ndim() != 2 || comps->shape(0) != kNumComponents || comps->shape(1) != b.n)
        throw py::value_error("comps: expected shape (7, N) with a single config");
      cp = comps->mutable_data();
    }
    double* tp = totals.mutable_data();
    py::gil_scoped_release release;
    score_rewards(b, params.data(), C, tp, cp);
  }, py::arg("arrays").noconvert(), py::arg("params").noconvert(), py::arg("totals").noconvert(), py::arg("comps").noconvert() = py::none(),
     "Score a batch (dict of validated TrajectoryBatch arrays) under C parameter rows.");

  auto adv_def = [&m](auto fn) {
    m.def("group_advantages", fn, py::arg("rewards").noconvert(), py::arg("group_ids").noconvert(),
          py::arg("role_ids").noconvert(), py::arg("method"), py::arg("scale"), py::arg("unbiased").noconvert(),
          py::arg("eps").noconvert(), py::arg("clip").noconvert(), py::arg("min_std").noconvert(),
          py::arg("out").noconvert(), py::arg("keep").noconvert());
  };
  adv_def(&advantages_binding<double, int64_t>);
  adv_def(&advantages_binding<float, int64_t>);
  adv_def(&advantages_binding<double, int32_t>);
  adv_def(&advantages_binding<float, int32_t>);

  m.def("loss_mask_from_spans", [](const Arr<int64_t>& offsets, const Arr<int64_t>& starts, const Arr<int64_t>& ends,
                                   const Arr<uint8_t>& trainable, const py::object& seq_len_arg,
                                   std::optional<Arr<uint8_t>> truncated, bool mask_truncated, Arr<uint8_t>& mask,
                                   std::optional<Arr<int32_t>> turn, Arr<int64_t>& counts) {
    const int64_t seq_len = int_arg(seq_len_arg, "seq_len", 0, INT64_MAX);
    SpanTable t;
    if (offsets.ndim() != 1 || offsets.shape(0) < 1) throw py::value_error("row_offsets: needs at least one entry (0)");
    if (starts.ndim() != 1) throw py::value_error("starts: expected a 1-d array");
    t.rows = offsets.shape(0) - 1;
    t.spans = starts.shape(0);
    need_len(ends, t.spans, "ends");
    need_len(trainable, t.spans, "trainable");
    if (mask.ndim() != 2 || mask.shape(0) != t.rows || mask.shape(1) != seq_len)
      throw py::value_error("out: expected a (B, seq_len) uint8 array");
    need_len(counts, t.rows, "counts");
    if (turn && (turn->ndim() != 2 || turn->shape(0) != t.rows || turn->shape(1) != seq_len))
      throw py::value_error("turn: expected a (B, seq_len) int32 array");
    if (truncated) need_len(*truncated, t.rows, "truncated");
    t.offsets = offsets.data();
    t.starts = starts.data();
    t.ends = ends.data();
    t.trainable = trainable.data();
    SpanError err;
    {
      py::gil_scoped_release release;
      err = validate_spans(t);
      if (err.field < 0)
        build_loss_mask(t, seq_len, truncated ? truncated->data() : nullptr, mask_truncated, mask.mutable_data(),
                        turn ? turn->mutable_data() : nullptr, counts.mutable_data());
    }
    if (err.field == 0)
      throw py::value_error("row_offsets[" + std::to_string(err.index) + "] = " +
                            std::to_string(t.offsets[err.index]) +
                            ": offsets must start at 0, not decrease, and end at the number of spans (" +
                            std::to_string(t.spans) + ")");
    if (err.field == 1)
      throw py::value_error("starts[" + std::to_string(err.index) + "] = " + std::to_string(t.starts[err.index]) +
                            ": must be >= 0");
    if (err.field == 2)
      throw py::value_error("ends[" + std::to_string(err.index) + "] = " + std::to_string(t.ends[err.index]) +
                            ": must be >= starts[" + std::to_string(err.index) + "] = " +
                            std::to_string(t.starts[err.index]));
  }, py::arg("offsets").noconvert(), py::arg("starts").noconvert(), py::arg("ends").noconvert(), py::arg("trainable").noconvert(), py::arg("seq_len"),
     py::arg("truncated").noconvert(), py::arg("mask_truncated").noconvert(), py::arg("mask").noconvert(), py::arg("turn").noconvert(), py::arg("counts").noconvert());

  auto bcast = [](auto tag) {
    using T = decltype(tag);
    return [](const Arr<T>& values, const Arr<uint8_t>& mask, std::optional<Arr<int32_t>> turn, Arr<T>& out) {
      if (mask.ndim() != 2) throw py::value_error("mask: expected a 2-d array");
      const int64_t rows = mask.shape(0), seq_len = mask.shape(1);
      need_len(values, rows, "values", turn ? 2 : 1);  // per-turn values with turn ids, else one per row
      const int64_t width = values.ndim() == 2 ? values.shape(1) : 1;
      if (turn && (turn->ndim() != 2 || turn->shape(0) != rows || turn->shape(1) != seq_len))
        throw py::value_error("turn_ids: expected the mask's shape");
      if (out.ndim() != 2 || out.shape(0) != rows || out.shape(1) != seq_len)
        throw py::value_error("out: expected the mask's shape");
      int64_t bad;
      {
        py::gil_scoped_release release;
        bad = broadcast_to_tokens(values.data(), width, mask.data(), turn ? turn->data() : nullptr, rows, seq_len,
                                  out.mutable_data());
      }
      if (bad >= 0)
        throw py::value_error("turn_ids[" + std::to_string(bad / seq_len) + ", " + std::to_string(bad % seq_len) +
                              "]: turn index out of range for values with " + std::to_string(width) + " columns");
    };
  };
  m.def("broadcast_to_tokens", bcast(double{}), py::arg("values").noconvert(), py::arg("mask").noconvert(), py::arg("turn").noconvert(), py::arg("out").noconvert());
  m.def("broadcast_to_tokens", bcast(float{}), py::arg("values").noconvert(), py::arg("mask").noconvert(), py::arg("turn").noconvert(), py::arg("out").noconvert());

  m.def("mask_row_counts", [](const Arr<uint8_t>& mask, Arr<int64_t>& counts) {
    if (mask.ndim() != 2) throw py::value_error("mask: expected a 2-d array");
    need_len(counts, mask.shape(0), "counts");
    int64_t* c = counts.mutable_data();
    py::gil_scoped_release release;
    mask_row_counts(mask.data(), mask.shape(0), mask.shape(1), c);
  }, py::arg("mask").noconvert(), py::arg("counts").noconvert());
}
