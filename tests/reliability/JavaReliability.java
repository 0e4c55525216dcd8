import ai.kiln.Function;
import ai.kiln.KilnModule;
import ai.kiln.NDArray;
import ai.kiln.Value;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The runtime's thread-safety and leak contracts from Java (issue 17 items 4 and 5), on a model
 * of tests/reliability/reliability_models.py (its manifest: function, inputs, expected outputs):
 *
 * <pre>
 *   java JavaReliability threads MANIFEST THREADS CALLS
 *       one KilnModule, one VM and one Function shared by THREADS Java threads, CALLS calls
 *       each, every output checked; threads also look functions up on the shared VM and load a
 *       VM of their own from the shared library every 100th call
 *   java JavaReliability leaks MANIFEST CYCLES
 *       CYCLES load / init / run / close cycles; prints the RSS after half of them (the first
 *       half warms up the JIT, the allocator and the heap) and at the end, each after a GC
 * </pre>
 * Prints one result line, then "ALL OK" and exits 0 when every check passed; exits 1 otherwise.
 */
public final class JavaReliability {
    private static String soPath;
    private static String function;
    private static final List<String> inDtypes = new ArrayList<>();
    private static final List<long[]> inShapes = new ArrayList<>();
    private static final List<byte[]> inData = new ArrayList<>();
    private static final List<float[]> expected = new ArrayList<>();

    private static void readManifest(Path manifest) throws IOException {
        Path dir = manifest.toAbsolutePath().getParent();
        soPath = dir.resolve("model.so").toString();
        for (String line : Files.readAllLines(manifest)) {
            String[] w = line.trim().split("\\s+");
            if (w[0].equals("function")) {
                function = w[1];
            } else if (w[0].equals("input")) {
                int code = Integer.parseInt(w[1]), bits = Integer.parseInt(w[2]), ndim = Integer.parseInt(w[3]);
                long[] shape = new long[ndim];
                for (int d = 0; d < ndim; d++) shape[d] = Long.parseLong(w[4 + d]);
                String dtype = code == 2 ? "float" + bits : code == 0 ? "int" + bits : code == 6 ? "bool" : null;
                if (dtype == null) throw new IllegalArgumentException("dtype code " + code);
                inDtypes.add(dtype);
                inShapes.add(shape);
                inData.add(Files.readAllBytes(dir.resolve(w[w.length - 1])));
            } else if (w[0].equals("output")) {
                ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(dir.resolve(w[2]))).order(ByteOrder.LITTLE_ENDIAN);
                float[] f = new float[Integer.parseInt(w[1])];
                b.asFloatBuffer().get(f);
                expected.add(f);
            }
        }
    }

    private static NDArray[] inputs() {
        NDArray[] a = new NDArray[inData.size()];
        for (int i = 0; i < a.length; i++) {
            a[i] = NDArray.empty(inShapes.get(i), inDtypes.get(i));
            a[i].asByteBuffer().put(inData.get(i));
        }
        return a;
    }

    /** The tensors of a result, in tuple order. */
    private static void flatten(Value v, List<float[]> out) {
        if (v.kind() == Value.Kind.TUPLE) {
            for (Value item : v.asTuple()) flatten(item, out);
        } else {
            out.add(v.asNDArray().toFloatArray());
        }
    }

    private static boolean matches(Value v) {
        List<float[]> got = new ArrayList<>();
        flatten(v, got);
        if (got.size() != expected.size()) return false;
        for (int k = 0; k < got.size(); k++) {
            float[] g = got.get(k), e = expected.get(k);
            if (g.length != e.length) return false;
            for (int i = 0; i < g.length; i++) {
                if (!(Math.abs(g[i] - e[i]) <= 1e-5f + 1e-4f * Math.abs(e[i]))) return false;
            }
        }
        return true;
    }

    private static KilnModule newVm(KilnModule lib) {
        KilnModule vm;
        try (Function loader = lib.getFunction("load_executable")) {
            vm = loader.invoke().asModule();
        }
        try (Function init = vm.getFunction("init")) {
            init.invoke().close();
            return vm;
        } catch (RuntimeException e) {
            vm.close();
            throw e;
        }
    }

    private static Value callWith(Function f, NDArray[] args) {
        return f.call((Object[]) args);
    }

    private static boolean threads(int nThreads, int calls) throws InterruptedException {
        AtomicLong ok = new AtomicLong(), wrong = new AtomicLong(), ownVms = new AtomicLong();
        List<String> errors = java.util.Collections.synchronizedList(new ArrayList<>());
        try (KilnModule lib = KilnModule.load(soPath); KilnModule vm = newVm(lib);
             Function shared = vm.getFunction(function)) {
            NDArray[] args = inputs(); // shared by every thread, only read
            Thread[] ts = new Thread[nThreads];
            for (int t = 0; t < nThreads; t++) {
                final int id = t;
                ts[t] = new Thread(() -> {
                    for (int c = 0; c < calls; c++) {
                        try {
                            Value r;
                            if (c % 100 == 99) { // a VM of its own from the shared library
                                try (KilnModule own = newVm(lib); Function f = own.getFunction(function)) {
                                    r = callWith(f, args);
                                }
                                ownVms.incrementAndGet();
                            } else if ((c + id) % 4 == 0) { // a lookup of its own on the shared VM
                                try (Function f = vm.getFunction(function)) {
                                    r = callWith(f, args);
                                }
                            } else { // the shared Function object
                                r = callWith(shared, args);
                            }
                            try (Value v = r) {
                                (matches(v) ? ok : wrong).incrementAndGet();
                            }
                        } catch (RuntimeException e) {
                            errors.add("thread " + id + " call " + c + ": " + e);
                            return;
                        }
                    }
                });
                ts[t].start();
            }
            for (Thread t : ts) t.join();
            for (NDArray a : args) a.close();
        }
        System.out.println("threads: " + nThreads + " x " + calls + " calls, " + ok + " outputs correct, "
                + wrong + " wrong, " + ownVms + " VMs loaded in threads");
        for (String e : errors.subList(0, Math.min(3, errors.size()))) System.err.println(e);
        return errors.isEmpty() && wrong.get() == 0 && ok.get() == (long) nThreads * calls;
    }

    private static long rss() throws IOException, InterruptedException {
        for (int i = 0; i < 3; i++) { // the Cleaner of anything left unclosed runs on its own thread
            System.gc();
            Thread.sleep(50);
        }
        String[] statm = new String(Files.readAllBytes(Paths.get("/proc/self/statm"))).trim().split(" ");
        return Long.parseLong(statm[1]) * 4096;
    }

    private static boolean leaks(int cycles) throws IOException, InterruptedException {
        long warm = 0;
        int correct = 0;
        for (int c = 0; c < cycles; c++) {
            if (c == cycles / 2) warm = rss();
            try (KilnModule lib = KilnModule.load(soPath); KilnModule vm = newVm(lib);
                 Function f = vm.getFunction(function)) {
                NDArray[] args = inputs();
                try (Value v = callWith(f, args)) {
                    if (matches(v)) correct++;
                }
                for (NDArray a : args) a.close();
            }
        }
        long end = rss();
        System.out.println("leaks: " + cycles + " cycles, " + correct + " correct, RSS after half of them "
                + warm / 1024 + " KiB, at the end " + end / 1024 + " KiB, grown " + (end - warm) / 1024 + " KiB");
        return correct == cycles;
    }

    public static void main(String[] args) throws Exception {
        readManifest(Paths.get(args[1]));
        boolean ok;
        if (args[0].equals("threads")) {
            ok = threads(Integer.parseInt(args[2]), Integer.parseInt(args[3]));
        } else if (args[0].equals("leaks")) {
            ok = leaks(Integer.parseInt(args[2]));
        } else {
            throw new IllegalArgumentException("mode " + args[0]);
        }
        if (!ok) System.exit(1);
        System.out.println("ALL OK");
    }
}
