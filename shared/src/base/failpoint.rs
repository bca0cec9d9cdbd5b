//! Crash injection for the exactly-once tests (`fail_point` knob). Compiled in always, inert
//! unless set: aborting the process is the closest a test gets to a Lambda timeout or OOM kill.

/// Abort the process at once: no unwinding, no destructors, no flushing of pending work.
pub fn abort(point: &str) -> ! {
    eprintln!("icestream: fail point {point} reached; aborting the process");
    std::process::abort()
}
