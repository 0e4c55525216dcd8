import ai.kiln.Device;
import ai.kiln.Function;
import ai.kiln.KilnException;
import ai.kiln.KilnModule;
import ai.kiln.NDArray;
import ai.kiln.Value;

/**
 * The catalogue of bad inputs (tests/reliability/error_catalogue.py, docs/errors.md) through the
 * Java binding: {@code java ErrorsJava DIR} provokes every case on the artifacts in DIR and prints
 * NAME, TAB, STATUS, TAB, MESSAGE per case (KilnException's status name and message, or the class
 * of an exception the binding throws itself), or NAME, TAB, n/a, TAB, WHY.
 */
public final class ErrorsJava {
    private static String dir;

    private interface Body {
        void run() throws Exception;
    }

    private static String p(String name) {
        return dir + "/" + name;
    }

    private static void check(String name, Body body) {
        try {
            body.run();
            System.out.println(name + "\tok\t");
        } catch (KilnException e) {
            System.out.println(name + "\t" + e.getStatusName() + "\t" + e.getMessage());
        } catch (Exception e) {
            System.out.println(name + "\t" + e.getClass().getSimpleName() + "\t" + e.getMessage());
        }
    }

    private static void na(String name, String why) {
        System.out.println(name + "\tn/a\t" + why);
    }

    private static KilnModule vm(String file) {
        try (KilnModule lib = KilnModule.load(p(file)); Function loader = lib.getFunction("load_executable")) {
            return loader.invoke().asModule();
        }
    }

    private static KilnModule ready(String file) {
        KilnModule vm = vm(file);
        try (Function init = vm.getFunction("init")) {
            init.call(Device.cpu()).close();
        }
        return vm;
    }

    private static NDArray zeros(String dtype, long... shape) {
        NDArray a = NDArray.empty(shape, dtype);
        a.asByteBuffer().put(new byte[(int) a.nbytes()]);
        return a;
    }

    private static void call(KilnModule m, String fn, Object... args) {
        try (Function f = m.getFunction(fn)) {
            f.call(args).close();
        }
    }

    public static void main(String[] args) {
        dir = args[0];
        check("missing_file", () -> KilnModule.load(p("missing.so")));
        check("not_elf", () -> KilnModule.load(p("not_elf.so")));
        check("truncated_library", () -> KilnModule.load(p("truncated.so")));
        check("not_a_kiln_library", () -> KilnModule.load(p("not_kiln.so")));
        check("foreign_isa", () -> KilnModule.load(p("foreign_isa.so")));
        check("missing_cpu_feature", () -> KilnModule.load(p("cpu_feature.so")));
        check("kernel_abi_version", () -> KilnModule.load(p("bad_abi.so")));
        check("newer_format", () -> vm("newer_format.so").close());
        check("corrupt_blob", () -> vm("corrupt_blob.so").close());
        check("no_executable", () -> {
            try (KilnModule lib = KilnModule.load(p("kernels.so"))) {
                lib.getFunction("load_executable");
            }
        });
        check("load_executable_args", () -> {
            try (KilnModule lib = KilnModule.load(p("mlp.so"))) {
                call(lib, "load_executable", 1);
            }
        });
        na("misaligned_static_blob", "static bundles are linked into C/C++ programs; Java loads .so files");
        KilnModule mlp = ready("mlp.so");
        NDArray x = zeros("float32", 1, 64);
        check("unknown_function", () -> mlp.getFunction("nope"));
        check("call_before_init", () -> {
            try (KilnModule m = vm("mlp.so")) {
                call(m, "forward", x);
            }
        });
        check("init_on_gpu", () -> {
            try (KilnModule m = vm("mlp.so")) {
                call(m, "init", new Device(2, 0)); // kDLCUDA
            }
        });
        check("init_bad_argument", () -> {
            try (KilnModule m = vm("mlp.so")) {
                call(m, "init", 3);
            }
        });
        check("missing_external", () -> {
            try (KilnModule m = vm("extern.so")) {
                call(m, "init", Device.cpu());
            }
        });
        check("profile_unknown", () -> call(mlp, "profile", "nope", x));
        check("profile_not_a_name", () -> call(mlp, "profile", 3));
        check("wrong_shape", () -> call(mlp, "forward", zeros("float32", 1, 65)));
        check("wrong_ndim", () -> call(mlp, "forward", zeros("float32", 64)));
        check("wrong_dtype", () -> call(mlp, "forward", zeros("int32", 1, 64)));
        check("too_few_arguments", () -> call(mlp, "forward"));
        check("too_many_arguments", () -> call(mlp, "forward", x, x));
        check("null_argument", () -> call(mlp, "forward", (Object) null));
        check("int_argument", () -> call(mlp, "forward", 3));
        check("string_argument", () -> call(mlp, "forward", "x"));
        na("non_contiguous", "a Java NDArray is always compact (row-major, no strides)");
        na("argument_on_gpu", "Java makes and receives tensors on the CPU only");
        try (KilnModule sym = ready("sym.so")) {
            check("symbolic_over_bound", () -> call(sym, "forward", zeros("float32", 17, 64)));
            check("symbolic_wrong_static_dim", () -> call(sym, "forward", zeros("float32", 5, 63)));
        }
        try (KilnModule cond = ready("if.so")) {
            check("condition_dtype", () -> call(cond, "main", zeros("float32"), zeros("float32", 2, 4)));
        }
        check("aliased_output", () -> {
            try (KilnModule kernels = KilnModule.load(p("kernels.so")); NDArray a = zeros("float32", 8)) {
                call(kernels, "main", a, a);
            }
        });
        check("tensor_negative_extent", () -> NDArray.empty(new long[] {-1}, "float32"));
        check("tensor_size_overflow", () -> NDArray.empty(new long[] {1L << 40, 1L << 40}, "float32"));
        na("tensor_on_gpu", "NDArray.empty takes no device: Java makes tensors on the CPU only");
        Function.Callback noop = a -> null;
        check("register_empty_name", () -> Function.register("", noop, false));
        Function.register("test.taken", noop, true);
        check("register_taken_name", () -> Function.register("test.taken", noop, false));
        Function.unregister("test.taken");
        check("unregister_unknown", () -> Function.unregister("test.never"));
        check("use_after_close", () -> {
            Function f = mlp.getFunction("forward");
            f.close();
            try (Value v = f.call(x)) {
                v.kind();
            }
        });
        na("malformed_onnx", "ONNX models are imported by the compiler, in Python");
        x.close();
        mlp.close();
    }
}
