package ai.kiln;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * A dense, row-major tensor on the CPU (a runtime kiln_tensor_t).
 *
 * <p>Memory: always allocated and owned by the runtime tensor ({@code kiln_tensor_create},
 * 64-byte aligned), for arrays made here and for tensors returned by calls alike. Java sees it
 * through a direct, native-order {@link ByteBuffer} made with JNI {@code NewDirectByteBuffer}
 * ({@link #asByteBuffer()}, zero copy). The NDArray holds one runtime reference; {@link #close()}
 * (or the Cleaner, once the NDArray is unreachable) drops it, and when the runtime holds no other
 * reference the memory is freed. A buffer from {@code asByteBuffer()} must therefore not be
 * used after the NDArray is closed or has become unreachable: keep the NDArray (e.g. in
 * try-with-resources) for as long as you use its buffer. The copying accessors
 * ({@code toFloatArray()} ...) have no such caveat.
 *
 * <p>Thread safety: contents are not synchronised (as for any array); closing must not race with
 * a use on another thread.
 */
public final class NDArray extends NativeHandle {
    private final long[] shape;
    private final String dtype;
    private final int elementBytes;
    private final ByteBuffer buffer;

    /** Called by the JNI shim with one runtime reference; data is NULL for an empty tensor. */
    NDArray(long handle, long[] shape, int code, int bits, int lanes, ByteBuffer data) {
        super(handle, Native::tensorRelease);
        this.shape = shape;
        this.dtype = DType.name(code, bits, lanes);
        this.elementBytes = (bits * lanes + 7) / 8;
        this.buffer = (data != null ? data : ByteBuffer.allocateDirect(0)).order(ByteOrder.nativeOrder());
    }

    /**
     * A new uninitialised tensor. dtype: "float32", "float64", "float16", "bfloat16", "int8",
     * "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool".
     */
    public static NDArray empty(long[] shape, String dtype) {
        int[] t = DType.parse(dtype);
        checkShape(shape);
        return Native.tensorCreate(shape.clone(), t[0], t[1], t[2]);
    }

    public static NDArray fromFloatArray(float[] data, long[] shape) {
        NDArray a = create(data.length, shape, "float32");
        a.buffer.duplicate().order(ByteOrder.nativeOrder()).asFloatBuffer().put(data);
        return a;
    }

    public static NDArray fromDoubleArray(double[] data, long[] shape) {
        NDArray a = create(data.length, shape, "float64");
        a.buffer.duplicate().order(ByteOrder.nativeOrder()).asDoubleBuffer().put(data);
        return a;
    }

    public static NDArray fromIntArray(int[] data, long[] shape) {
        NDArray a = create(data.length, shape, "int32");
        a.buffer.duplicate().order(ByteOrder.nativeOrder()).asIntBuffer().put(data);
        return a;
    }

    public static NDArray fromLongArray(long[] data, long[] shape) {
        NDArray a = create(data.length, shape, "int64");
        a.buffer.duplicate().order(ByteOrder.nativeOrder()).asLongBuffer().put(data);
        return a;
    }

    /**
     * A new string tensor of {@code shape} holding {@code values} (docs/strings.md): one block of
     * {offset, length} records, one per element, then the values' UTF-8 bytes, copied and
     * checked by the runtime's string library.
     */
    public static NDArray fromStrings(String[] values, long[] shape) {
        checkShape(shape);
        if (numel(shape) != values.length) {
            throw new IllegalArgumentException("data has " + values.length + " elements, shape "
                    + Arrays.toString(shape) + " needs " + numel(shape));
        }
        byte[][] utf8 = new byte[values.length][];
        long total = 16L * values.length;
        for (int i = 0; i < values.length; i++) {
            utf8[i] = values[i].getBytes(StandardCharsets.UTF_8);
            total += utf8[i].length;
        }
        if (total > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("strings too large for one block: " + total + " bytes");
        }
        ByteBuffer block = ByteBuffer.allocate((int) total).order(ByteOrder.nativeOrder());
        long offset = 16L * values.length;
        for (byte[] s : utf8) {
            block.putLong(offset).putLong(s.length);
            offset += s.length;
        }
        for (byte[] s : utf8) {
            block.put(s);
        }
        return Native.tensorFromStringBlock(block.array(), shape.clone());
    }

    /** The elements of a string tensor in row-major order. */
    public String[] toStrings() {
        int n = checkedSize("string");
        ByteBuffer b = view();
        String[] out = new String[n];
        for (int i = 0; i < n; i++) {
            long offset = b.getLong(16 * i), length = b.getLong(16 * i + 8);
            byte[] bytes = new byte[(int) length];
            ByteBuffer s = b.duplicate();
            s.position((int) offset);
            s.get(bytes);
            out[i] = new String(bytes, StandardCharsets.UTF_8);
        }
        return out;
    }

    public float[] toFloatArray() {
        float[] out = new float[checkedSize("float32")];
        view().asFloatBuffer().get(out);
        return out;
    }

    public double[] toDoubleArray() {
        double[] out = new double[checkedSize("float64")];
        view().asDoubleBuffer().get(out);
        return out;
    }

    public int[] toIntArray() {
        int[] out = new int[checkedSize("int32")];
        view().asIntBuffer().get(out);
        return out;
    }

    public long[] toLongArray() {
        long[] out = new long[checkedSize("int64")];
        view().asLongBuffer().get(out);
        return out;
    }

    /** The shape (a copy). */
    public long[] shape() {
        handle();
        return shape.clone();
    }

    /** The dtype name, e.g. "float32". */
    public String dtype() {
        handle();
        return dtype;
    }

    /** The number of elements. */
    public long size() {
        handle();
        return numel(shape);
    }

    /** The number of bytes of data. */
    public long nbytes() {
        handle();
        return numel(shape) * elementBytes;
    }

    /**
     * A zero-copy, native-order view of the data (position 0, limit nbytes). Valid only while this
     * NDArray is open and reachable; see the class comment.
     */
    public ByteBuffer asByteBuffer() {
        return view();
    }

    private ByteBuffer view() {
        handle(); // IllegalStateException after close
        return buffer.duplicate().order(ByteOrder.nativeOrder());
    }

    private int checkedSize(String wanted) {
        handle();
        if (!dtype.equals(wanted)) {
            throw new IllegalStateException("NDArray has dtype " + dtype + ", not " + wanted);
        }
        long n = numel(shape);
        if (n > Integer.MAX_VALUE) {
            throw new IllegalStateException("NDArray too large for a Java array: " + n + " elements");
        }
        return (int) n;
    }

    private static NDArray create(int length, long[] shape, String dtype) {
        checkShape(shape);
        if (numel(shape) != length) {
            throw new IllegalArgumentException("data has " + length + " elements, shape "
                    + Arrays.toString(shape) + " needs " + numel(shape));
        }
        return empty(shape, dtype);
    }

    private static void checkShape(long[] shape) {
        if (shape == null) {
            throw new NullPointerException("shape");
        }
        for (long d : shape) {
            if (d < 0) {
                throw new IllegalArgumentException("negative extent in shape " + Arrays.toString(shape));
            }
        }
    }

    private static long numel(long[] shape) {
        long n = 1;
        for (long d : shape) {
            n = Math.multiplyExact(n, d);
        }
        return n;
    }

    @Override
    public String toString() {
        return isClosed() ? "NDArray(closed)" : "NDArray(" + dtype + ", " + Arrays.toString(shape) + ")";
    }
}
