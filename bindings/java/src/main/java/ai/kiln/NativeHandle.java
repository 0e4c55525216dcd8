package ai.kiln;

import java.lang.ref.Cleaner;
import java.util.function.LongConsumer;

/**
 * A reference to a native runtime object (module, function, tensor). Holds exactly one runtime
 * reference, given back by {@link #close()} (idempotent) or, if the object becomes unreachable
 * without being closed, by a {@link Cleaner} (a safety net; close explicitly or use
 * try-with-resources). Any use after close throws {@link IllegalStateException}.
 *
 * <p>Closing must not race with a use of the same object on another thread.
 */
abstract class NativeHandle implements AutoCloseable {
    static final Cleaner CLEANER = Cleaner.create();

    /** The native pointer; read by the JNI shim. Stale once {@link #closed} is set. */
    final long handle;
    private final Cleaner.Cleanable cleanable;
    private volatile boolean closed;

    NativeHandle(long handle, LongConsumer release) {
        this.handle = handle;
        this.cleanable = CLEANER.register(this, new Release(handle, release));
    }

    /** The native pointer, or IllegalStateException when closed. */
    final long handle() {
        if (closed) {
            throw new IllegalStateException(getClass().getSimpleName() + " is closed");
        }
        return handle;
    }

    /** Whether {@link #close()} was called. */
    public final boolean isClosed() {
        return closed;
    }

    /** Releases the native reference. Calling it again does nothing. */
    @Override
    public void close() {
        closed = true;
        cleanable.clean(); // runs the release at most once
    }

    /** Must not refer to the handle object, or the Cleaner would never run. */
    private static final class Release implements Runnable {
        private final long handle;
        private final LongConsumer release;

        Release(long handle, LongConsumer release) {
            this.handle = handle;
            this.release = release;
        }

        @Override
        public void run() {
            release.accept(handle);
        }
    }
}
