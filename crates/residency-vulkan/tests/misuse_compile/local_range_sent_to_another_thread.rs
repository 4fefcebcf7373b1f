// A thread's local range dropped on another thread (its arena's pages are not locked): neither
// the range nor a shared reference to its arena can cross threads.
use residency_vulkan::BufferPool;

fn send(pool: &BufferPool) {
    let ranges = pool.local_ranges().unwrap();
    let range = ranges.allocate(256, 0).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(move || drop(range));
    });
}

fn main() {}
