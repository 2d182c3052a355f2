// examples/apply_and_arithmetic.cpp — the code of
// docs/tutorials/apply_and_arithmetic.md.
//
// Every C++ block of the tutorial is an excerpt of this file, and every output
// block is what it prints. The TORCH_CHECKs verify what the text says.
#include <ATen/record_function.h>
#include <tensordict/tensordict.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

using tensordict::NestedKey;
using tensordict::TensorDict;
using namespace torch::indexing;

namespace {

// A batch of 4 transitions: float observations, integer actions.
TensorDict make_batch() {
  return TensorDict({{"obs", torch::arange(12.).reshape({4, 3})},
                     {"action", torch::arange(4).reshape({4, 1})},
                     {"reward", torch::ones({4})},
                     {{"next", "obs"}, torch::arange(12.).reshape({4, 3}) + 1}},
                    {4});
}

// Prints the keys of `td` (nested ones too, leaves only) on one line.
void print_keys(const std::string& name, const TensorDict& td) {
  std::cout << name << ":";
  for (const NestedKey& k : td.keys(true, true)) std::cout << " " << k.str();
  std::cout << "\n";
}

// Prints a tensor's values on one line.
void print_values(const std::string& name, const torch::Tensor& t) {
  std::cout << name << " =";
  torch::Tensor flat = t.to(torch::kDouble).flatten();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    std::cout << " " << flat[i].item<double>();
  }
  std::cout << "\n";
}

// The message of the c10::Error that `fn` throws ("" if it throws nothing).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.msg();
  }
  return "";
}

// Records the names of the top-level ATen ops run on this thread while it
// lives (ops that those ops call internally are not recorded).
class OpRecorder {
 public:
  OpRecorder() {
    ops_ = &names_;
    handle_ =
        at::addThreadLocalCallback(at::RecordFunctionCallback(&start, &end));
  }
  ~OpRecorder() {
    at::removeCallback(handle_);
    ops_ = nullptr;
  }
  const std::vector<std::string>& names() const { return names_; }

 private:
  static std::unique_ptr<at::ObserverContext> start(
      const at::RecordFunction& fn) {
    if (depth_++ == 0 && ops_ != nullptr) ops_->push_back(fn.name());
    return nullptr;
  }
  static void end(const at::RecordFunction&, at::ObserverContext*) { --depth_; }

  static thread_local int depth_;
  static thread_local std::vector<std::string>* ops_;
  std::vector<std::string> names_;
  at::CallbackHandle handle_;
};
thread_local int OpRecorder::depth_ = 0;
thread_local std::vector<std::string>* OpRecorder::ops_ = nullptr;

void apply() {
  TensorDict td = make_batch();
  TensorDict doubled = td.apply([](const torch::Tensor& t) { return t * 2; });
  TensorDict floats = td.apply([](const torch::Tensor& t) {
    return t.is_floating_point() ? t : torch::Tensor();  // undefined: dropped
  });
  TensorDict totals = td.apply([](const torch::Tensor& t) { return t.sum(0); },
                               std::vector<int64_t>{});  // batch_size []

  print_keys("floats", floats);
  print_values("totals obs", totals.get("obs"));
  TORCH_CHECK(doubled.get({"next", "obs"}).equal(td.get({"next", "obs"}) * 2));
  TORCH_CHECK(!floats.contains("action") && floats.contains({"next", "obs"}));
  TORCH_CHECK(floats.get("obs").is_same(td.get("obs")));  // returned as is
  TORCH_CHECK(totals.batch_size().empty());
  TORCH_CHECK(totals.get("obs").sizes() == std::vector<int64_t>{3});
}

void apply_lockstep() {
  TensorDict online = make_batch().to_float();
  TensorDict target =
      online.apply([](const torch::Tensor& t) { return t * 0; });
  TensorDict updated = target.apply(
      [](const torch::Tensor& tgt, const torch::Tensor& src) {
        return 0.9 * tgt + 0.1 * src;  // a soft target update
      },
      online);

  TensorDict a = make_batch(), b = make_batch(), c = make_batch();
  TensorDict biggest = a.apply(
      [](const std::vector<torch::Tensor>& xs) {  // xs = {a's, b's, c's leaf}
        return torch::max(torch::max(xs[0], xs[1]), xs[2]);
      },
      {b * 2, c * 3});

  print_values("updated obs[1]", updated.get("obs")[1]);
  TORCH_CHECK(updated.get("obs").allclose(online.get("obs") * 0.1));
  TORCH_CHECK(biggest.get("obs").equal(a.get("obs") * 3));

  // Different keys: an error that lists the keys missing from each side.
  auto add = [](const torch::Tensor& x, const torch::Tensor& y) {
    return x + y;
  };
  std::string msg =
      error_of([&] { (void)a.apply(add, b.exclude({"reward"})); });
  TORCH_CHECK(msg.find("missing from the right-hand side: [reward]") !=
                  std::string::npos,
              msg);
}

void apply_in_place() {
  TensorDict td = make_batch();
  torch::Tensor obs = td.get("obs");
  td.apply_([](const torch::Tensor& t) { return t.clamp(0, 5); });
  TORCH_CHECK(td.get("obs").is_same(obs));  // the same tensor, new values
  TORCH_CHECK(obs.max().item<double>() == 5);
  print_values("obs after apply_", obs);
}

void named_apply() {
  TensorDict td = make_batch();
  TensorDict scaled =
      td.named_apply([](const NestedKey& key, const torch::Tensor& t) {
        if (key == "action") return torch::Tensor();  // drop it
        return key.back() == "obs" ? t / 10 : t;      // obs and ("next", "obs")
      });
  print_keys("scaled", scaled);
  TORCH_CHECK(scaled.get({"next", "obs"}).equal(td.get({"next", "obs"}) / 10));
  TORCH_CHECK(scaled.get("reward").is_same(td.get("reward")));
}

void key_manipulation() {
  TensorDict td = make_batch();
  torch::Tensor reward = td.get("reward");

  td.update(TensorDict({{"done", torch::zeros({4}, torch::kBool)},
                        {{"next", "reward"}, torch::ones({4})}},
                       {4}));  // adds done, merges into next
  td.update_(TensorDict({{"reward", torch::full({4}, 2.)}}, {4}));  // copies
  TORCH_CHECK(td.get("reward").is_same(reward) &&
              reward.eq(2).all().item<bool>());

  TensorDict small = td.select({"obs", {"next", "obs"}});  // same tensors
  TensorDict rest = td.exclude({"obs", "next"});
  TensorDict flat = td.flatten_keys();        // "next.obs", "next.reward"
  TensorDict nested = flat.unflatten_keys();  // ("next", "obs"), ...

  print_keys("td", td);
  print_keys("small", small);
  print_keys("rest", rest);
  print_keys("flat", flat);
  TORCH_CHECK(small.get({"next", "obs"}).is_same(td.get({"next", "obs"})));
  TORCH_CHECK(flat.get("next.obs").is_same(td.get({"next", "obs"})));
  TORCH_CHECK(nested.keys(true, true) == td.keys(true, true));

  for (const auto& item :
       td.items(/*include_nested=*/true, /*leaves_only=*/true)) {
    std::cout << item.first.str() << " " << item.second.tensor().sizes()
              << "\n";
  }
  int64_t numel = 0;
  for (const auto& v : td.values(true, true)) numel += v.tensor().numel();
  TORCH_CHECK(numel == 12 + 4 + 4 + 12 + 4 + 4);
}

void arithmetic() {
  TensorDict td = make_batch().to_float();
  torch::Tensor weights = torch::tensor({1., 0., 0., 2.});  // one per row

  TensorDict sum = td + td;            // leaf by leaf, same keys
  TensorDict scaled = td * 0.5;        // a scalar
  TensorDict shifted = 1 + td;         // scalars on the left: + and *
  TensorDict weighted = td * weights;  // a batch-shaped tensor scales each row
  TensorDict negated = -td;

  print_values("weighted obs[:, 0]", weighted.get("obs").select(1, 0));
  TORCH_CHECK(sum.get("obs").equal(td.get("obs") * 2));
  TORCH_CHECK(scaled.get("action").equal(td.get("action") / 2));
  TORCH_CHECK(shifted.get("reward").eq(2).all().item<bool>());
  TORCH_CHECK(weighted.get({"next", "obs"})[1].eq(0).all().item<bool>());
  TORCH_CHECK(negated.get("obs").equal(-td.get("obs")));
  TORCH_CHECK((make_batch() / 2).get("action").is_floating_point());
}

void in_place_arithmetic() {
  TensorDict td = make_batch().to_float();
  torch::Tensor obs = td.get("obs");
  std::vector<std::string> ops;
  {
    OpRecorder recorder;
    td += 1;       // one _foreach_add_ over the 4 leaves
    td.mul_(0.5);  // one _foreach_mul_
    td += td;      // one _foreach_add_ with a list of leaves
    ops = recorder.names();
  }
  for (const auto& op : ops) std::cout << op << "\n";
  TORCH_CHECK(td.get("obs").is_same(obs));  // the leaves kept their identity
  TORCH_CHECK(obs.equal(torch::arange(12.).reshape({4, 3}) + 1));
  TORCH_CHECK(ops == std::vector<std::string>({"aten::_foreach_add_",
                                               "aten::_foreach_mul_",
                                               "aten::_foreach_add_"}));

  td.mul_(torch::tensor({1., 1., 0., 0.}));  // zero rows 2 and 3
  TORCH_CHECK(
      td.get({"next", "obs"}).index({Slice(2, None)}).eq(0).all().item<bool>());

  // Out of place: the non-in-place kernel, once for the whole dict.
  OpRecorder recorder;
  TensorDict product = td * td;
  TORCH_CHECK(recorder.names() ==
              std::vector<std::string>{"aten::_foreach_mul"});
}

void in_place_errors() {
  TensorDict td = make_batch();  // "action" holds int64
  torch::Tensor obs = td.get("obs").clone();
  try {
    td.mul_(0.5);
  } catch (const c10::Error& e) {
    std::cout << e.msg() << "\n";
  }
  TORCH_CHECK(td.get("obs").equal(obs));  // all-or-nothing: nothing changed
}

void masking() {
  TensorDict td = make_batch();
  torch::Tensor done = torch::tensor({false, true, false, true});  // [4]
  TensorDict reset = make_batch().apply(
      [](const torch::Tensor& t) { return torch::full_like(t, -1); });

  TensorDict filled = td.masked_fill(done, 0);  // rows 1 and 3 zeroed
  TensorDict mixed = td.where(~done, reset);    // !done ? td : reset
  TensorDict kept = td.where(~done, 0);         // !done ? td : 0
  td.masked_fill_(done, 7);                     // in place
  td.fill_("reward", 0);                        // one leaf
  td.fill_("next", 1);                          // every leaf of a sub-dict

  print_values("mixed obs[:, 0]", mixed.get("obs").select(1, 0));
  TORCH_CHECK(filled.get("obs")[1].eq(0).all().item<bool>());
  TORCH_CHECK(filled.get("obs")[2].equal(make_batch().get("obs")[2]));
  TORCH_CHECK(mixed.get("action")[3].item<int64_t>() == -1);
  TORCH_CHECK(kept.get({"next", "obs"})[3].eq(0).all().item<bool>());
  TORCH_CHECK(td.get("obs")[3].eq(7).all().item<bool>());
  TORCH_CHECK(td.get("reward").eq(0).all().item<bool>());
  TORCH_CHECK(td.get({"next", "obs"}).eq(1).all().item<bool>());
}

void reductions() {
  TensorDict td({{"obs", torch::arange(24.).reshape({2, 4, 3})},
                 {"reward", torch::arange(8.).reshape({2, 4})}},
                {2, 4});
  TensorDict total = td.sum();                       // over every batch dim: []
  TensorDict per_env = td.mean(1);                   // over dim 1: [2]
  TensorDict lowest = td.min();                      // values only
  TensorDict highest = td.max(0, /*keepdim=*/true);  // [1, 4]

  print_values("total reward", total.get("reward"));
  print_values("per_env reward", per_env.get("reward"));
  print_values("lowest obs", lowest.get("obs"));
  std::cout << "highest: batch_size " << highest.batch_size() << ", obs "
            << highest.get("obs").sizes() << "\n";
  TORCH_CHECK(total.batch_size().empty() &&
              total.get("obs").sizes() == std::vector<int64_t>{3});
  TORCH_CHECK(per_env.batch_size() == std::vector<int64_t>{2});
  TORCH_CHECK(highest.batch_size() == std::vector<int64_t>({1, 4}));
  std::cout << error_of([&] { (void)make_batch().mean(); }) << "\n";
}

void dtype_and_autograd() {
  TensorDict td = make_batch();
  TensorDict f64 = td.to_double();  // every leaf, int64 too
  TensorDict f32 = f64.to_float();
  TensorDict f16 = td.half();
  TensorDict bf16 = td.bfloat16();
  TORCH_CHECK(f64.get("action").scalar_type() == torch::kDouble);
  TORCH_CHECK(f32.get("obs").scalar_type() == torch::kFloat);
  TORCH_CHECK(f16.get("reward").scalar_type() == torch::kHalf);
  TORCH_CHECK(bf16.get({"next", "obs"}).scalar_type() == torch::kBFloat16);

  td.requires_grad_();  // floating-point leaves only
  TORCH_CHECK(td.get("obs").requires_grad());
  TORCH_CHECK(!td.get("action").requires_grad());  // int64: skipped
  TensorDict loss_terms = td * 2;                  // recorded by autograd
  loss_terms.get("obs").sum().backward();
  TORCH_CHECK(td.get("obs").grad().eq(2).all().item<bool>());
  loss_terms.detach_();  // in place, every leaf
  TORCH_CHECK(!loss_terms.get("obs").requires_grad());
  std::cout << "obs.grad[0] = " << td.get("obs").grad()[0].sum().item<float>()
            << " (sum of 3 elements)\n";
}

}  // namespace

int main() {
  apply();
  apply_lockstep();
  apply_in_place();
  named_apply();
  key_manipulation();
  arithmetic();
  in_place_arithmetic();
  in_place_errors();
  masking();
  reductions();
  dtype_and_autograd();
  std::cout << "apply_and_arithmetic: all checks passed\n";
}
