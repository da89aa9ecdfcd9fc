// Starts DynamoDB Local on 127.0.0.1 only (its own runner binds every interface) and exits
// when the process that started it does, so a test binary's shared instance never outlives
// it. Arguments are DynamoDB Local's own (-port N -inMemory -sharedDb -disableTelemetry).
// Prints "anthracite-dynamodb-local listening" once the server accepts connections.

import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

public class LoopbackDynamoDbLocal {
    public static void main(String[] args) throws Exception {
        ProcessHandle.current().parent().ifPresent(p -> p.onExit().thenRun(() -> System.exit(0)));
        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
        Field field = DynamoDBProxyServer.class.getDeclaredField("server");
        field.setAccessible(true);
        Server server = (Server) field.get(proxy);
        for (Connector c : server.getConnectors()) {
            ((ServerConnector) c).setHost("127.0.0.1");
        }
        proxy.start();
        System.out.println("anthracite-dynamodb-local listening");
        System.out.flush();
        proxy.join();
    }
}
