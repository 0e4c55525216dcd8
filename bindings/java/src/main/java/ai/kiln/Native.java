package ai.kiln;

/**
 * The JNI entry points (bindings/java/src/main/native/kiln_jni.c). Loaded from the system
 * property {@code kiln.jni.library} (an absolute path to libkiln_jni.so) when set, otherwise
 * with {@code System.loadLibrary("kiln_jni")} (java.library.path).
 *
 * <p>The shim keeps no per-thread state: each call converts its arguments, calls the runtime and
 * converts the result (or throws KilnException with kiln_last_error()) before returning.
 */
final class Native {
    static {
        String path = System.getProperty("kiln.jni.library");
        if (path != null && !path.isEmpty()) {
            System.load(path);
        } else {
            System.loadLibrary("kiln_jni");
        }
    }

    private Native() {}

    static native long moduleLoad(String path);
    static native void moduleRelease(long module);
    static native String moduleKind(long module);
    static native String[] moduleFunctionNames(long module);
    static native long moduleGetFunction(long module, String name);

    static native void functionRelease(long function);
    static native String functionName(long function);
    /**
     * Calls the function once with all arguments. args holds only null, Long, Double, String,
     * NDArray, KilnModule, Function, Device and Object[] (a tuple); returns the converted result.
     */
    static native Object functionCall(long function, Object[] args);

    /** Creates a tensor (kiln_tensor_create) and returns the NDArray owning it. */
    static native NDArray tensorCreate(long[] shape, int code, int bits, int lanes);
    static native void tensorRelease(long tensor);
}
