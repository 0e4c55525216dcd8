package ai.kiln;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The result of a call: null, int, float, string, tensor, module, function, tuple or device.
 *
 * <p>Ownership: a tensor, module or function result is an open {@link NDArray}, {@link KilnModule}
 * or {@link Function} that owns its runtime reference; {@code asNDArray()} etc. return that
 * object (the same one each time) and the caller closes it, or closes the Value, which closes
 * every object it holds (tuple items included). Unclosed objects are released by a Cleaner once
 * unreachable. Scalars, strings and devices are plain Java values.
 */
public final class Value implements AutoCloseable {
    /** The kinds of kiln_value_t. */
    public enum Kind { NULL, INT, FLOAT, STRING, TENSOR, MODULE, FUNCTION, TUPLE, DEVICE }

    private final Object payload;
    private final Kind kind;

    Value(Object nativeResult) {
        if (nativeResult instanceof Object[]) {
            Object[] items = (Object[]) nativeResult;
            List<Value> values = new ArrayList<>(items.length);
            for (Object item : items) {
                values.add(new Value(item));
            }
            this.payload = Collections.unmodifiableList(values);
        } else {
            this.payload = nativeResult;
        }
        this.kind = kindOf(this.payload);
    }

    private static Kind kindOf(Object p) {
        if (p == null) return Kind.NULL;
        if (p instanceof Long) return Kind.INT;
        if (p instanceof Double) return Kind.FLOAT;
        if (p instanceof String) return Kind.STRING;
        if (p instanceof NDArray) return Kind.TENSOR;
        if (p instanceof KilnModule) return Kind.MODULE;
        if (p instanceof Function) return Kind.FUNCTION;
        if (p instanceof Device) return Kind.DEVICE;
        if (p instanceof List) return Kind.TUPLE;
        throw new IllegalArgumentException("unexpected value " + p.getClass().getName());
    }

    public Kind kind() {
        return kind;
    }

    public boolean isNull() {
        return kind == Kind.NULL;
    }

    Object payload() {
        return payload;
    }

    public long asLong() {
        return (Long) expect(Kind.INT);
    }

    /** A float value, or an int value widened. */
    public double asDouble() {
        if (kind == Kind.INT) {
            return (Long) payload;
        }
        return (Double) expect(Kind.FLOAT);
    }

    public String asString() {
        return (String) expect(Kind.STRING);
    }

    public NDArray asNDArray() {
        return (NDArray) expect(Kind.TENSOR);
    }

    /** The module (a {@link Kiln.Module}, which is a {@link KilnModule}). */
    public Kiln.Module asModule() {
        return (Kiln.Module) expect(Kind.MODULE);
    }

    public Function asFunction() {
        return (Function) expect(Kind.FUNCTION);
    }

    public Device asDevice() {
        return (Device) expect(Kind.DEVICE);
    }

    /** The items of a tuple (an unmodifiable list). */
    @SuppressWarnings("unchecked")
    public List<Value> asTuple() {
        return (List<Value>) expect(Kind.TUPLE);
    }

    private Object expect(Kind wanted) {
        if (kind != wanted) {
            throw new ClassCastException("value is " + kind + ", not " + wanted);
        }
        return payload;
    }

    /** Closes every native object this value holds. Idempotent. */
    @Override
    public void close() {
        if (payload instanceof NativeHandle) {
            ((NativeHandle) payload).close();
        } else if (kind == Kind.TUPLE) {
            for (Value item : asTuple()) {
                item.close();
            }
        }
    }

    @Override
    public String toString() {
        return kind == Kind.NULL ? "Value(null)" : "Value(" + kind + ": " + payload + ")";
    }
}
