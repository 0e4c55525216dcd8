package ai.kiln;

/** DLPack data types by name ("float32" ...). */
final class DType {
    static final int INT = 0, UINT = 1, FLOAT = 2, OPAQUE_HANDLE = 3, BFLOAT = 4, BOOL = 6;

    private DType() {}

    /** {code, bits, lanes} for a name. */
    static int[] parse(String name) {
        if (name == null) {
            throw new NullPointerException("dtype");
        }
        switch (name) {
            case "bool": return new int[] {BOOL, 8, 1};
            case "bfloat16": return new int[] {BFLOAT, 16, 1};
            default: break;
        }
        int code;
        String bits;
        if (name.startsWith("float")) {
            code = FLOAT;
            bits = name.substring(5);
        } else if (name.startsWith("uint")) {
            code = UINT;
            bits = name.substring(4);
        } else if (name.startsWith("int")) {
            code = INT;
            bits = name.substring(3);
        } else {
            throw new IllegalArgumentException("unknown dtype '" + name + "'");
        }
        switch (bits) {
            case "8": case "16": case "32": case "64":
                if (code == FLOAT && bits.equals("8")) break;
                return new int[] {code, Integer.parseInt(bits), 1};
            default: break;
        }
        throw new IllegalArgumentException("unknown dtype '" + name + "'");
    }

    static String name(int code, int bits, int lanes) {
        String base;
        switch (code) {
            case INT: base = "int" + bits; break;
            case UINT: base = "uint" + bits; break;
            case FLOAT: base = "float" + bits; break;
            case BFLOAT: base = "bfloat" + bits; break;
            case BOOL: base = "bool"; break;
            case OPAQUE_HANDLE:
                if (bits == 128 && lanes == 1) {
                    return "string"; // a string tensor's records (docs/strings.md)
                }
                base = "code" + code + "_" + bits;
                break;
            default: base = "code" + code + "_" + bits; break;
        }
        return lanes == 1 ? base : base + "x" + lanes;
    }
}
