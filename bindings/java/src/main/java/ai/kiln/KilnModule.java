package ai.kiln;

import java.lang.ref.Reference;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;

/**
 * A runtime module (kiln_module_t): a kernel library loaded from a file, or a VM module returned
 * by a library's {@code load_executable}. Holds one runtime reference; close it (or use
 * try-with-resources). Functions looked up from a module keep it alive on the native side, so
 * closing a module while its functions are still in use is safe.
 *
 * <p>Thread safety: a Module may be shared between threads (the runtime is thread-safe), but
 * must not be closed while another thread uses it.
 *
 * <p>Named {@code KilnModule}, not {@code Module}, so that {@code import ai.kiln.*;} compiles
 * beside the implicit {@code java.lang.*} (whose {@code Module} the old name clashed with). Every
 * module is also a {@link Kiln.Module}, the old name, which code that imports it by name
 * ({@code import ai.kiln.Kiln.Module;}) keeps using.
 */
public class KilnModule extends NativeHandle {
    KilnModule(long handle) { // through Module, which every module is: see its constructor
        super(handle, Native::moduleRelease);
    }

    /**
     * Loads a library exported by Kiln (e.g. {@code ex.export_library("mlp.so")}).
     *
     * @throws KilnException IO when the file cannot be loaded, INVALID_FORMAT when it is not a
     *     Kiln library, VERSION_MISMATCH for another ABI version
     */
    public static KilnModule load(String path) {
        return Kiln.Module.load(path);
    }

    /**
     * Looks up a function. Each call returns a new {@link Function} (with its own argument list),
     * so threads can each look up their own.
     *
     * @throws KilnException NOT_FOUND when there is no such function (the message lists the
     *     available names)
     */
    public Function getFunction(String name) {
        if (name == null) {
            throw new NullPointerException("name");
        }
        try {
            return new Function(Native.moduleGetFunction(handle(), name));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** "library" or "vm". */
    public String kind() {
        try {
            return Native.moduleKind(handle());
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** The names of the module's functions. */
    public List<String> functionNames() {
        try {
            return Collections.unmodifiableList(Arrays.asList(Native.moduleFunctionNames(handle())));
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    @Override
    public String toString() {
        return isClosed() ? "KilnModule(closed)" : "KilnModule(" + kind() + ")";
    }
}
