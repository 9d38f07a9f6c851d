/* shapetrace unit tests: the site rule (tools/lib/site.c) on the stacks of real clients, as the
 * traces of a Hugging Face Llama under torch's DTensor, CuPy's NCCL binding, vLLM's pynccl, a
 * program on a static CUDA runtime and JAX recorded them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "tools/lib/site.h"

#define SP "/usr/local/lib/python3.12/site-packages/"

static struct shp_site_frame py(const char *text, const char *file)
{
    return (struct shp_site_frame){
        .python = true, .path = file, .path_len = strlen(file), .text = text};
}

static struct shp_site_frame nat(const char *text, const char *module)
{
    return (struct shp_site_frame){
        .path = module, .path_len = module ? strlen(module) : 0, .text = text};
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_llama(void)
{
    test_group("Llama under DTensor");
    /* The row-parallel all-reduce of the attention's output projection, innermost first. */
    struct shp_site_frame f[] = {
        nat("0xf18009 (libtorch_cuda.so)", SP "torch/lib/libtorch_cuda.so"),
        nat("0x1c2d0 (libc10.so)", SP "torch/lib/libc10.so"),
        py("py: redispatch (torch/_ops.py:872)", SP "torch/_ops.py"),
        py("py: forward_no_grad (torch/_library/autograd.py:41)", SP "torch/_library/autograd.py"),
        nat("0xdce912 (libtorch_python.so)", SP "torch/lib/libtorch_python.so"),
        py("py: all_reduce (torch/distributed/_functional_collectives.py:201)",
           SP "torch/distributed/_functional_collectives.py"),
        py("py: _reduce_value (torch/distributed/tensor/placement_types.py:700)",
           SP "torch/distributed/tensor/placement_types.py"),
        py("py: _call_impl (torch/nn/modules/module.py:1786)", SP "torch/nn/modules/module.py"),
        nat("_PyObject_Call+0x5c (libpython3.12.so.1.0)", "/usr/lib/libpython3.12.so.1.0"),
        py("py: forward (transformers/models/llama/modeling_llama.py:290)",
           SP "transformers/models/llama/modeling_llama.py"),
        py("py: wrapper (transformers/utils/generic.py:940)", SP "transformers/utils/generic.py"),
        py("py: decode (serve_llama.py:58)", "/app/serve_llama.py"),
        py("py: <module> (serve_llama.py:80)", "/app/serve_llama.py"),
        nat("__libc_start_call_main (libc.so.6)", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    };
    size_t site = shp_site_pick(NULL, f, N(f));
    test_cond("the site is the model's line, past 9 framework frames", site == 9);
    test_cond("torch's C++ libraries are framework code", shp_site_skipped(NULL, &f[0]));
    test_cond("the interpreter is", shp_site_skipped(NULL, &f[8]));
    test_cond("transformers' utilities are", shp_site_skipped(NULL, &f[10]));
    test_cond("the script is not", !shp_site_skipped(NULL, &f[11]));
    test_cond("libc is runtime code", shp_site_skipped(NULL, &f[13]));

    struct shp_site_rule r = {0};
    test_cond("a user glob is taken", shp_site_rule_add(&r, "*/transformers/models/*") == 0);
    test_cond("and moves the site to the script", shp_site_pick(&r, f, N(f)) == 11);
    shp_site_rule_free(&r);
    test_cond("a freed rule is the built-in list again", r.n == 0 && r.globs == NULL);
}

/* The same call as the H200 recorded it (2026-12-03), torch in a virtualenv made in /opt/torch:
 * a package's glob is matched below site-packages only, so the model's file is not torch's. */
static void test_llama_venv(void)
{
    test_group("Llama in a virtualenv named torch");
#define VENV "/opt/torch/.venv/lib/python3.12/site-packages/"
    struct shp_site_frame f[] = {
        nat("c10d::ProcessGroupNCCL::allreduce_impl(...)+0xf2 (libtorch_cuda.so)",
            VENV "torch/lib/libtorch_cuda.so"),
        py("py: redispatch (" VENV "torch/_ops.py:872)", VENV "torch/_ops.py"),
        nat("pybind11::cpp_function::dispatcher(_object*, _object*, _object*)+0xe30 "
            "(libtorch_python.so)",
            VENV "torch/lib/libtorch_python.so"),
        py("py: _prepare_output_fn (" VENV "torch/distributed/tensor/parallel/style.py:290)",
           VENV "torch/distributed/tensor/parallel/style.py"),
        py("py: _call_impl (" VENV "torch/nn/modules/module.py:1885)",
           VENV "torch/nn/modules/module.py"),
        py("py: forward (" VENV "transformers/models/llama/modeling_llama.py:280)",
           VENV "transformers/models/llama/modeling_llama.py"),
        py("py: __call__ (" VENV "transformers/modeling_layers.py:109)",
           VENV "transformers/modeling_layers.py"),
        py("py: decode_step (/work/tests/gpu/llama_tp.py:69)", "/work/tests/gpu/llama_tp.py"),
    };
#undef VENV
    test_cond("the site is the attention's o_proj line in modeling_llama.py",
              shp_site_pick(NULL, f, N(f)) == 5);
    struct shp_site_rule r = {0};
    shp_site_rule_add(&r, "/opt/torch/*");
    test_cond("a whole-path glob of the user's still reaches the environment",
              shp_site_pick(&r, f, N(f)) == 7);
    shp_site_rule_free(&r);
    struct shp_site_frame mine = py("py: f (/home/u/torch/app.py:3)", "/home/u/torch/app.py");
    test_cond("a folder named torch outside site-packages is the user's",
              !shp_site_skipped(NULL, &mine));
}

static void test_cupy_vllm_jax(void)
{
    test_group("CuPy, vLLM, JAX");
    struct shp_site_frame cupy[] = {
        nat("ncclAllReduce+0x29 (libnccl.so.2)", SP "nvidia/nccl/lib/libnccl.so.2"),
        nat("0x124d9 (nccl.cpython-312-x86_64-linux-gnu.so)",
            SP "cupy_backends/cuda/libs/nccl.cpython-312-x86_64-linux-gnu.so"),
        nat("0x1a0 (python3.12)", "/usr/bin/python3.12"),
        py("py: step (tp_cupy.py:31)", "tp_cupy.py"),
    };
    test_cond("CuPy: its binding and the interpreter are skipped",
              shp_site_pick(NULL, cupy, N(cupy)) == 3);

    /* ctypes, as tests/load/ctypes_nccl.py records it under pyenv's CPython 3.11. */
    struct shp_site_frame ctypes[] = {
        nat("0x6f7a (libffi.so.8)", "/usr/lib/x86_64-linux-gnu/libffi.so.8"),
        nat("ffi_call+0xcd (libffi.so.8)", "/usr/lib/x86_64-linux-gnu/libffi.so.8"),
        nat("_ctypes_callproc (Modules/_ctypes/callproc.c:923)",
            "/root/.pyenv/versions/3.11.7/lib/python3.11/lib-dynload/"
            "_ctypes.cpython-311-x86_64-linux-gnu.so"),
        py("py: copy_rows (tests/load/ctypes_nccl.py:34)", "/src/tests/load/ctypes_nccl.py"),
    };
    test_cond("ctypes: libffi and _ctypes are skipped",
              shp_site_pick(NULL, ctypes, N(ctypes)) == 3);

    struct shp_site_frame vllm[] = {
        py("py: ncclAllReduce (pynccl_wrapper.py:330)",
           SP "vllm/distributed/device_communicators/pynccl_wrapper.py"),
        py("py: all_reduce (pynccl.py:120)", SP "vllm/distributed/device_communicators/pynccl.py"),
        py("py: tensor_model_parallel_all_reduce (communication_op.py:13)",
           SP "vllm/distributed/communication_op.py"),
        py("py: forward (linear.py:1400)", SP "vllm/model_executor/layers/linear.py"),
        py("py: forward (llama.py:120)", SP "vllm/model_executor/models/llama.py"),
        py("py: execute_model (gpu_model_runner.py:1800)", SP "vllm/v1/worker/gpu_model_runner.py"),
    };
    test_cond("vLLM: the model's line, past the layer and the communicator",
              shp_site_pick(NULL, vllm, N(vllm)) == 4);
    struct shp_site_rule keep = {0};
    shp_site_rule_add(&keep, "!*/vllm/model_executor/layers/*");
    test_cond("a '!' glob of the user's keeps what the built-in list skips",
              shp_site_pick(&keep, vllm, N(vllm)) == 3);
    shp_site_rule_free(&keep);

    struct shp_site_frame editable[] = {
        py("py: all_reduce (pynccl.py:120)", "/src/vllm/vllm/distributed/pynccl.py"),
        py("py: forward (llama.py:120)", "/src/vllm/vllm/model_executor/models/llama.py"),
    };
    test_cond("an editable install is not a package: its frames are the user's",
              shp_site_pick(NULL, editable, N(editable)) == 0);
    struct shp_site_rule ed = {0};
    shp_site_rule_add(&ed, "*/vllm/distributed/*");
    test_cond("until a glob of the user's names it",
              shp_site_pick(&ed, editable, N(editable)) == 1);
    shp_site_rule_free(&ed);

    struct shp_site_frame jax[] = {
        nat("0x99 (libnccl.so.2)", SP "nvidia/nccl/lib/libnccl.so.2"),
        nat("xla::gpu::NcclAllReduce+0x10 (xla_extension.so)", SP "jaxlib/xla_extension.so"),
        py("py: __call__ (jax/_src/pjit.py:300)", SP "jax/_src/pjit.py"),
        py("py: train_step (model.py:77)", "/work/model.py"),
    };
    test_cond("JAX: jaxlib and jax are skipped", shp_site_pick(NULL, jax, N(jax)) == 3);
}

static void test_native(void)
{
    test_group("native programs");
    struct shp_site_frame doubles[] = {
        nat("ncclAllGather (nccl.c:900)", "/src/build/tests/libnccl.so.2"),
        nat("gather_activations (desync.c:30)", "/src/build/examples/desync"),
        nat("main (desync.c:50)", "/src/build/examples/desync"),
    };
    test_cond("a program on the NCCL double: its own function",
              shp_site_pick(NULL, doubles, N(doubles)) == 1);
    struct shp_site_frame statrt[] = {
        nat("cudaMemcpy (static_cudart.c:120)", "/src/build/tests/static_rt"),
        nat("copy_rows (static_rt.c:40)", "/src/build/tests/static_rt"),
    };
    test_cond("a static runtime's entry point in the program is skipped by name",
              shp_site_pick(NULL, statrt, N(statrt)) == 1);
    struct shp_site_frame none[] = {
        nat("0x7f12", NULL),
        nat("0x7f13", NULL),
    };
    test_cond("frames without a module are the program's", shp_site_pick(NULL, none, 2) == 0);
    struct shp_site_frame fw[] = {
        nat("ncclAllReduce (libnccl.so.2)", "/x/libnccl.so.2"),
        py("py: _worker (threading.py:1012)", "/usr/lib/python3.12/threading.py"),
        nat("start_thread (libc.so.6)", "/x/libc.so.6"),
    };
    test_cond("all framework: the innermost Python frame", shp_site_pick(NULL, fw, N(fw)) == 1);
    struct shp_site_frame clock[] = {
        nat("__vdso_clock_gettime+0x56 ([vdso])", "[vdso]"),
        nat("clock_gettime@@GLIBC_2.17 (clock_gettime.c:42)", "/x/libc.so.6"),
        nat("spin (app.c:8)", "/opt/app/bin/app"),
    };
    test_cond("the vDSO is the kernel's, below libc: skipped",
              shp_site_pick(NULL, clock, N(clock)) == 2);
    struct shp_site_frame vdso_pid = nat("0xb66 ([vdso: 2295])", "[vdso: 2295]");
    test_cond("so is libdwfl's name for it", shp_site_skipped(NULL, &vdso_pid));
    struct shp_site_frame notv = nat("run (v.c:1)", "/opt/app/v");
    test_cond("a module named v is not the vDSO", !shp_site_skipped(NULL, &notv));
    test_cond("the standard library is the interpreter's", shp_site_skipped(NULL, &fw[1]));
    /* An ASan build of the program, stopped in its clock (seen in the snapshot tests): the
     * interceptor sits between libc and the caller, in libasan or linked into the program. */
    struct shp_site_frame asan[] = {
        nat("__vdso_clock_gettime+0x56 ([vdso])", "[vdso]"),
        nat("clock_gettime@@GLIBC_2.17 (clock_gettime.c:42)", "/x/libc.so.6"),
        nat("__interceptor_clock_gettime (sanitizer_common_interceptors.inc:2189)",
            "/usr/lib/x86_64-linux-gnu/libasan.so.8"),
        nat("spin_clock_gettime (snap_clock.c:40)", "/opt/app/bin/app"),
    };
    test_cond("a sanitizer's interceptor is skipped", shp_site_pick(NULL, asan, N(asan)) == 3);
    asan[2] = nat(asan[2].text, "/opt/app/bin/app");
    test_cond("also when it is linked into the program", shp_site_pick(NULL, asan, N(asan)) == 3);
    test_cond("no frames: 0", shp_site_pick(NULL, NULL, 0) == 0);
}

static void test_lists(void)
{
    test_group("lists of globs");
    struct shp_site_rule r = {0};
    test_cond("a comma list",
              shp_site_rule_add_list(&r, "*/mylib/*,,fn:dispatch_*,libfoo.so*") == 0);
    test_cond("empty items are ignored", r.n == 3);
    struct shp_site_frame f = nat("dispatch_op (lib.c:9)", "/opt/app/bin/app");
    test_cond("an fn: glob matches the function", shp_site_skipped(&r, &f));
    struct shp_site_frame g = nat("run (foo.c:1)", "/opt/libfoo.so.1");
    test_cond("a glob without '/' matches the file's name", shp_site_skipped(&r, &g));
    struct shp_site_frame h = py("py: go (mylib/x.py:3)", "mylib/x.py");
    test_cond("a relative file name gets a leading '/'", shp_site_skipped(&r, &h));
    test_cond("an empty glob is refused", shp_site_rule_add(&r, "") == -EINVAL);
    test_cond("so is fn: alone", shp_site_rule_add(&r, "fn:") == -EINVAL);
    test_cond("and ! alone", shp_site_rule_add(&r, "!") == -EINVAL);
    shp_site_rule_free(&r);
    size_t n = 0;
    while (shp_site_builtin[n])
        n++;
    test_cond("the built-in list is not empty", n > 20);
}

int main(void)
{
    test_llama();
    test_llama_venv();
    test_cupy_vllm_jax();
    test_native();
    test_lists();
    return test_report();
}
