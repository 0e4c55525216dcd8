package ai.kiln;

/**
 * An error reported by the Kiln runtime. {@link #getMessage()} is the runtime's message
 * (kiln_last_error), e.g. "forward: argument 0 'x' expected shape (1, 784), got (1, 785)";
 * {@link #getStatus()} is the runtime's status code (kiln_status_t, e.g. 0x11 shape mismatch).
 */
public class KilnException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** Status codes of kiln_runtime.h. */
    public static final int INTERNAL = 0x01, RUNTIME = 0x02, INVALID_ARGUMENT = 0x10,
            SHAPE_MISMATCH = 0x11, DTYPE_MISMATCH = 0x12, DEVICE_MISMATCH = 0x13,
            UNSUPPORTED = 0x14, INVALID_STATE = 0x15, NOT_FOUND = 0x20, IO = 0x30,
            INVALID_FORMAT = 0x31, VERSION_MISMATCH = 0x32, OUT_OF_MEMORY = 0x40;

    private final int status;
    private final String statusName;

    /** Called by the JNI shim. */
    public KilnException(int status, String statusName, String message) {
        super(message);
        this.status = status;
        this.statusName = statusName;
    }

    /** The runtime's status code (never 0). */
    public int getStatus() {
        return status;
    }

    /** The runtime's short name for the status, e.g. "shape mismatch". */
    public String getStatusName() {
        return statusName;
    }

    @Override
    public String toString() {
        return "ai.kiln.KilnException [" + statusName + " (0x" + Integer.toHexString(status) + ")]: "
                + getMessage();
    }
}
