package ai.kiln;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * The JNI entry points (bindings/java/src/main/native/kiln_jni.c). The library is found, in
 * order:
 * <ol>
 *   <li>the system property {@code kiln.jni.library} (an absolute path to libkiln_jni.so);
 *   <li>{@code java.library.path} ({@code System.loadLibrary("kiln_jni")});
 *   <li>inside the jar: the platform jar ({@code kiln-VERSION-linux-x86_64.jar}) carries
 *       {@code ai/kiln/native/linux-x86_64/libkiln_jni.so}, copied to a temporary file (deleted
 *       at exit) and loaded from there, so an application needs nothing but the jar.
 * </ol>
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
            try {
                System.loadLibrary("kiln_jni");
            } catch (UnsatisfiedLinkError notOnPath) {
                loadBundled(notOnPath);
            }
        }
    }

    /** The resource name of the bundled library for this platform, e.g. linux-x86_64. */
    static String platform() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
        if (os.startsWith("linux")) os = "linux";
        if (arch.equals("amd64")) arch = "x86_64";
        if (arch.equals("arm64")) arch = "aarch64";
        return os + "-" + arch;
    }

    private static void loadBundled(UnsatisfiedLinkError notOnPath) {
        String resource = "native/" + platform() + "/libkiln_jni.so";
        try (InputStream in = Native.class.getResourceAsStream(resource)) {
            if (in == null) {
                UnsatisfiedLinkError e = new UnsatisfiedLinkError(
                        "kiln_jni is not on java.library.path and this jar has no " + "ai/kiln/" + resource
                        + " (use the platform jar kiln-VERSION-" + platform() + ".jar, or set -Dkiln.jni.library)");
                e.addSuppressed(notOnPath);
                throw e;
            }
            Path copy = Files.createTempFile("kiln_jni", ".so");
            copy.toFile().deleteOnExit();
            Files.copy(in, copy, StandardCopyOption.REPLACE_EXISTING);
            System.load(copy.toAbsolutePath().toString());
        } catch (IOException io) {
            UnsatisfiedLinkError e = new UnsatisfiedLinkError("cannot copy the bundled kiln_jni out of the jar: " + io);
            e.addSuppressed(notOnPath);
            throw e;
        }
    }

    private Native() {}

    static native long moduleLoad(String path);
    static native void moduleRelease(long module);
    static native String moduleKind(long module);
    static native String[] moduleFunctionNames(long module);
    static native long moduleGetFunction(long module, String name);

    static native void functionRelease(long function);
    /** Registers a Java callback as an external function (kiln_function_create + kiln_register_function). */
    static native void functionRegister(String name, Function.Callback body, boolean override);
    static native void functionUnregister(String name);
    static native String functionName(long function);
    /**
     * Calls the function once with all arguments. args holds only null, Long, Double, String,
     * NDArray, KilnModule, Function, Device and Object[] (a tuple); returns the converted result.
     */
    static native Object functionCall(long function, Object[] args);

    /** Creates a tensor (kiln_tensor_create) and returns the NDArray owning it. */
    static native NDArray tensorCreate(long[] shape, int code, int bits, int lanes);
    static native NDArray tensorFromStringBlock(byte[] block, long[] shape);
    static native void tensorRelease(long tensor);
}
