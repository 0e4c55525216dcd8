package ai.kiln;

/** A device (DLPack DLDevice): plain data, nothing to close. Only the CPU is supported. */
public final class Device {
    /** DLPack device type kDLCPU. */
    public static final int CPU = 1;

    private final int type;
    private final int id;

    public Device(int type, int id) {
        this.type = type;
        this.id = id;
    }

    /** The host CPU. */
    public static Device cpu() {
        return new Device(CPU, 0);
    }

    /** The DLPack device type (DLDeviceType). */
    public int type() {
        return type;
    }

    /** The device index. */
    public int id() {
        return id;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Device && ((Device) o).type == type && ((Device) o).id == id;
    }

    @Override
    public int hashCode() {
        return type * 31 + id;
    }

    @Override
    public String toString() {
        return (type == CPU ? "cpu" : "device" + type) + ":" + id;
    }
}
