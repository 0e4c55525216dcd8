package ai.kiln;

/**
 * Holds {@link Kiln.Module}: {@link KilnModule} under its old name. It is nested, not a top-level
 * class of {@code ai.kiln}, so {@code import ai.kiln.*;} never brings a {@code Module} that would
 * clash with {@code java.lang.Module}; code written against the old name imports it by name:
 *
 * <pre>{@code
 * import ai.kiln.Kiln.Module;
 *
 * try (Module lib = Module.load("mlp.so")) {
 *     Module vm = lib.getFunction("load_executable").invoke().asModule();
 * }
 * }</pre>
 */
public final class Kiln {
    private Kiln() {}

    /** A runtime module: every {@link KilnModule} the runtime hands out is one. */
    public static final class Module extends KilnModule {
        Module(long handle) { // called by the JNI shim, which hands over one reference
            super(handle);
        }

        /**
         * Loads a library exported by Kiln (see {@link KilnModule#load}).
         *
         * @throws KilnException IO when the file cannot be loaded, INVALID_FORMAT when it is not
         *     a Kiln library, VERSION_MISMATCH for another ABI version
         */
        public static Module load(String path) {
            if (path == null) {
                throw new NullPointerException("path");
            }
            return new Module(Native.moduleLoad(path));
        }
    }
}
