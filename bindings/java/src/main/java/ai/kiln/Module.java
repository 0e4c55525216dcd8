package ai.kiln;

/**
 * {@link KilnModule} under its old name: every module the runtime hands out is one, so code written
 * against the old name keeps compiling when it imports it by name, which wins over the implicit
 * {@code java.lang.Module}:
 *
 * <pre>{@code
 * import ai.kiln.Module;
 *
 * try (Module lib = Module.load("mlp.so")) {
 *     Module vm = lib.getFunction("load_executable").invoke().asModule();
 * }
 * }</pre>
 *
 * With {@code import ai.kiln.*;} the name {@code Module} is ambiguous with {@code java.lang.Module};
 * write {@code KilnModule} there.
 */
public final class Module extends KilnModule {
    Module(long handle) { // called by the JNI shim, which hands over one reference
        super(handle);
    }

    /**
     * Loads a library exported by Kiln (see {@link KilnModule#load}).
     *
     * @throws KilnException IO when the file cannot be loaded, INVALID_FORMAT when it is not a
     *     Kiln library, VERSION_MISMATCH for another ABI version
     */
    public static Module load(String path) {
        if (path == null) {
            throw new NullPointerException("path");
        }
        return new Module(Native.moduleLoad(path));
    }
}
