package ai.kiln;

import java.lang.ref.Reference;
import java.util.ArrayList;
import java.util.List;

/**
 * A runtime function (kiln_function_t). Arguments are collected on the Java side with
 * {@code pushArg(...)} and passed to the runtime in ONE native call by {@link #invoke()}, which
 * then clears them (also when the call fails):
 *
 * <pre>{@code
 * NDArray out = vm.getFunction("forward").pushArg(x).pushArg(w1).invoke().asNDArray();
 * }</pre>
 *
 * <p>Thread safety: the native function may be called from several threads at once, but a
 * Function object's argument list is not synchronised. Give each thread its own Function
 * ({@link KilnModule#getFunction} returns a new one each time), or use {@link #call(Object...)},
 * which does not touch the argument list. The native shim keeps no per-thread state.
 *
 * <p>Arguments are borrowed for the call: NDArrays, Modules and Functions passed as arguments
 * must stay open until invoke returns.
 */
public final class Function extends NativeHandle {
    private final List<Object> args = new ArrayList<>();

    Function(long handle) { // called with one runtime reference
        super(handle, Native::functionRelease);
    }

    public Function pushArg(NDArray value) {
        return add(requireNonNull(value));
    }

    public Function pushArg(KilnModule value) {
        return add(requireNonNull(value));
    }

    public Function pushArg(Function value) {
        return add(requireNonNull(value));
    }

    public Function pushArg(Device value) {
        return add(requireNonNull(value));
    }

    public Function pushArg(long value) {
        return add(value);
    }

    public Function pushArg(double value) {
        return add(value);
    }

    public Function pushArg(String value) {
        return add(requireNonNull(value));
    }

    /** Pushes a value returned by another call (any kind, including null and tuples). */
    public Function pushArg(Value value) {
        return add(requireNonNull(value));
    }

    /** The number of arguments collected so far. */
    public int numArgs() {
        return args.size();
    }

    /** Drops the collected arguments. */
    public Function clearArgs() {
        args.clear();
        return this;
    }

    /**
     * Calls the function with the collected arguments, then clears them.
     *
     * @throws KilnException with the runtime's status and message when the call fails
     * @throws IllegalStateException when this function or an argument is closed
     */
    public Value invoke() {
        Object[] snapshot = args.toArray();
        args.clear();
        return call(snapshot);
    }

    /**
     * Calls the function with the given arguments (NDArray, KilnModule, Function, Device, Long or
     * Integer, Double or Float, String, Value, null, or Object[] for a tuple) without touching
     * the collected ones.
     */
    public Value call(Object... arguments) {
        Object[] converted = new Object[arguments.length];
        for (int i = 0; i < arguments.length; i++) {
            converted[i] = toNative(arguments[i], i);
        }
        try {
            return new Value(Native.functionCall(handle(), converted));
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(arguments);
        }
    }

    /**
     * The body of an external function implemented in Java: executables call it by name
     * ({@code call_dps_packed("env.relu", ...)}), in destination-passing style.
     *
     * <p>The arguments are the runtime's values, borrowed for the call: NDArrays are views of
     * the runtime tensors (read them with {@code toFloatArray()}, write outputs through
     * {@code asByteBuffer()}); they are closed when the callback returns, so do not keep them.
     * Return null, or a value as {@link #call(Object...)} takes it. An exception thrown here
     * fails the runtime call with KILN_ERR_RUNTIME and the exception's text as the message.
     */
    @FunctionalInterface
    public interface Callback {
        Object invoke(Value... args) throws Exception;
    }

    /**
     * Registers {@code body} as the external function {@code name} in the runtime's registry
     * (VMs look their external functions up in {@code init}):
     *
     * <pre>{@code
     * Function.register("env.relu", args -> {
     *     float[] x = args[0].asNDArray().toFloatArray();
     *     FloatBuffer out = args[1].asNDArray().asByteBuffer().asFloatBuffer();
     *     for (float v : x) out.put(Math.max(v, 0f));
     *     return null;
     * }, true);
     * }</pre>
     *
     * @param override replace a function already registered under that name (else that is an error)
     * @throws KilnException INVALID_ARGUMENT when the name is taken and override is false
     */
    public static void register(String name, Callback body, boolean override) {
        if (name == null || body == null) {
            throw new NullPointerException(name == null ? "name" : "body");
        }
        Native.functionRegister(name, body, override);
    }

    /**
     * Removes a registered external function.
     *
     * @throws KilnException NOT_FOUND when nothing is registered under that name
     */
    public static void unregister(String name) {
        if (name == null) {
            throw new NullPointerException("name");
        }
        Native.functionUnregister(name);
    }

    /**
     * Called by the JNI shim for a registered Callback: wraps the arguments (owned Java objects
     * made for this call), runs the callback, closes the arguments, and returns the result
     * normalised for the shim.
     */
    static Object dispatch(Callback body, Object[] nativeArgs) throws Exception {
        Value[] values = new Value[nativeArgs.length];
        for (int i = 0; i < nativeArgs.length; i++) {
            values[i] = new Value(nativeArgs[i]);
        }
        try {
            return toNative(body.invoke(values), 0);
        } finally {
            for (Value v : values) {
                v.close();
            }
        }
    }

    /** The function's name. */
    public String name() {
        try {
            return Native.functionName(handle());
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** Normalises an argument to what the shim accepts and checks that handles are open. */
    static Object toNative(Object a, int index) {
        if (a == null || a instanceof Long || a instanceof Double || a instanceof String
                || a instanceof Device) {
            return a;
        }
        if (a instanceof NativeHandle) {
            ((NativeHandle) a).handle(); // throws IllegalStateException when closed
            return a;
        }
        if (a instanceof Integer || a instanceof Short || a instanceof Byte) {
            return ((Number) a).longValue();
        }
        if (a instanceof Float) {
            return ((Float) a).doubleValue();
        }
        if (a instanceof Boolean) {
            return ((Boolean) a) ? 1L : 0L;
        }
        if (a instanceof Value) {
            return toNative(((Value) a).payload(), index);
        }
        if (a instanceof Object[]) {
            Object[] items = (Object[]) a;
            Object[] out = new Object[items.length];
            for (int i = 0; i < items.length; i++) {
                out[i] = toNative(items[i], index);
            }
            return out;
        }
        if (a instanceof List) {
            return toNative(((List<?>) a).toArray(), index);
        }
        throw new IllegalArgumentException(
                "argument " + index + ": unsupported type " + a.getClass().getName());
    }

    private Function add(Object value) {
        handle(); // fail early after close
        args.add(value);
        return this;
    }

    private static <T> T requireNonNull(T value) {
        if (value == null) {
            throw new NullPointerException("argument");
        }
        return value;
    }
}
