import CGtk
import EntityStore
import Foundation
import GtkSupport

/// The benchmark (`make gtk-bench`): how long after launch the window's first frame is drawn, and how long a batch
/// of 1% of the books, saved by another process, takes to reach GTK (the adapter's splices and GTK's handlers) and
/// the screen (the next frame drawn). Figures, not checks: the machine is shared.
@MainActor
final class Bench {
    let window: BookWindow
    let options: Options
    private var afterPaint: (() -> Void)?
    private var batchStarted: UInt64 = 0
    private var batchApplied: UInt64 = 0
    private var waiting: (() -> Void)?
    private var rows: [(apply: Double, screen: Double, save: Double)] = []

    init(window: BookWindow, options: Options) {
        self.window = window
        self.options = options
        window.adapter.onBatchStart = { [unowned self] in batchStarted = wallClockNanoseconds() }
        let shown = window.adapter.onBatch
        window.adapter.onBatch = { [unowned self] in
            shown?()
            batchApplied = wallClockNanoseconds()
            gtk_widget_queue_draw(window.listView)
            waiting?()
            waiting = nil
        }
    }

    func start() {
        guard let clock = gtk_widget_get_frame_clock(window.window) else { fail("the window has no frame clock") }
        es_connect(
            UnsafeMutableRawPointer(clock), "after-paint",
            unsafeBitCast(
                { (_: gpointer?, data: gpointer?) in
                    let address = UInt(bitPattern: data)
                    MainActor.assumeIsolated {
                        let bench = Unmanaged<Bench>.fromOpaque(UnsafeRawPointer(bitPattern: address)!)
                            .takeUnretainedValue()
                        let next = bench.afterPaint
                        bench.afterPaint = nil
                        next?()
                    }
                } as @convention(c) (gpointer?, gpointer?) -> Void, to: GCallback.self),
            Unmanaged.passUnretained(self).toOpaque())
        afterPaint = { [unowned self] in
            let books = window.adapter.controller.sections.reduce(0) { $0 + $1.numberOfObjects }
            if let launched = options.launchedAt {
                print(
                    String(
                        format: "gtk-bench: %d books on %d shelves: first frame %.1f ms after launch", books,
                        window.adapter.controller.sections.count, Double(wallClockNanoseconds() - launched) / 1e6))
            }
            Task { @MainActor in
                do {
                    try await self.batches(of: max(books / 100, 1))
                    exit(0)
                } catch {
                    fail("bench: \(error)")
                }
            }
        }
    }

    private func batches(of size: Int) async throws {
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        writer.arguments = [
            "writer", "--store", options.store, "--saves", "\(options.saves)", "--bulk", "\(size)", "--seed", "11",
        ]
        let input = Pipe(), output = Pipe()
        writer.standardInput = input
        writer.standardOutput = output
        try writer.run()
        defer { writer.terminate() }
        var reader = LineReader(output.fileHandleForReading)
        for round in 0..<options.saves {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                waiting = { [unowned self] in
                    afterPaint = { continuation.resume() }
                }
                input.fileHandleForWriting.write(Data("go\n".utf8))
            }
            let painted = wallClockNanoseconds()
            guard let line = reader.next(), let saved = line.split(separator: " ").last.flatMap({ UInt64($0) }) else {
                throw CheckFailure(description: "the writer said nothing after save \(round)")
            }
            let row = (
                apply: Double(batchApplied - batchStarted) / 1e6, screen: Double(painted - batchStarted) / 1e6,
                save: Double(painted - saved) / 1e6
            )
            rows.append(row)
            print(
                String(
                    format: "gtk-bench: batch %d of %d changes: applied to GTK in %.2f ms, on screen %.2f ms after "
                        + "it arrived, %.1f ms after the other process's save began", round, size, row.apply,
                    row.screen,
                    row.save))
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        print(
            String(
                format: "gtk-bench: median of %d batches of %d changes: applied %.2f ms, on screen %.2f ms, from the "
                    + "save's start %.1f ms", rows.count, size, median(rows.map(\.apply)), median(rows.map(\.screen)),
                median(rows.map(\.save))))
    }
}

/// Lines of a pipe, read as they come.
struct LineReader {
    let handle: FileHandle
    var buffer = Data()

    init(_ handle: FileHandle) { self.handle = handle }

    mutating func next() -> String? {
        while true {
            if let end = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[buffer.startIndex..<end], as: UTF8.self)
                buffer.removeSubrange(buffer.startIndex...end)
                return line
            }
            let more = handle.availableData
            if more.isEmpty { return nil }
            buffer.append(more)
        }
    }
}
