// A Curator client as lockrun's rival (tests/integration/zk_cli.rs):
// `CuratorRival HOSTS PATH DIR [LIMIT|read|write]` takes the InterProcessMutex
// at PATH (or, with LIMIT, a lease of the InterProcessSemaphoreV2 at PATH;
// with `read` or `write`, that lock of the InterProcessReadWriteLock), then
// writes the wall clock in ns to DIR/beat every 10 ms until DIR/go exists,
// and lets go. Its own timestamps are what the test compares.
import java.io.File;
import java.io.FileWriter;
import java.time.Instant;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

public class CuratorRival {
    static void beat(File dir) throws Exception {
        Instant now = Instant.now();
        long ns = now.getEpochSecond() * 1_000_000_000L + now.getNano();
        try (FileWriter w = new FileWriter(new File(dir, "beat"), true)) {
            w.write(ns + "\n");
        }
    }

    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                args[0], 4000, 4000, new RetryOneTime(100));
        client.start();
        File dir = new File(args[2]);
        if (args.length > 3 && (args[3].equals("read") || args[3].equals("write"))) {
            InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, args[1]);
            InterProcessMutex lock = args[3].equals("read") ? rw.readLock() : rw.writeLock();
            lock.acquire();
            hold(dir);
            lock.release();
        } else if (args.length > 3) {
            InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(
                    client, args[1], Integer.parseInt(args[3]));
            Lease lease = sem.acquire();
            hold(dir);
            sem.returnLease(lease);
        } else {
            InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
            mutex.acquire();
            hold(dir);
            mutex.release();
        }
        client.close();
    }

    static void hold(File dir) throws Exception {
        while (!new File(dir, "go").exists()) {
            beat(dir);
            Thread.sleep(10);
        }
        beat(dir);
    }
}
