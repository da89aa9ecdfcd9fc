// Formats the KRaft log directory (once: `--ignore-formatted` makes a restart keep its data)
// and runs one Apache Kafka broker+controller from the properties file given as the only
// argument, in one JVM. Exits when the process that started it does, so a test binary's
// shared broker never outlives it, even when the test binary is killed.

public class LoopbackKafka {
    /** Any fixed cluster id: every start of a test broker formats or reuses its own directory. */
    static final String CLUSTER_ID = "YW50aHJhY2l0ZS10ZXN0cw";

    public static void main(String[] args) throws Exception {
        ProcessHandle.current().parent().ifPresent(p -> p.onExit().thenRun(() -> Runtime.getRuntime().halt(0)));
        int formatted = kafka.tools.StorageTool.execute(
            new String[] {"format", "-t", CLUSTER_ID, "-c", args[0], "--ignore-formatted"}, System.out);
        if (formatted != 0) {
            System.out.println("anthracite-kafka: formatting the log directory failed: " + formatted);
            Runtime.getRuntime().halt(2);
        }
        kafka.Kafka.main(args);
    }
}
