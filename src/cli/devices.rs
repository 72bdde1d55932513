//! `sonotrack devices`: the capture devices and serial ports of this machine.

use sonotrack::audio::capture;

pub fn run() {
    if capture::AVAILABLE {
        let devs = capture::list_devices();
        println!("capture devices (ALSA names for audio.device):");
        if devs.is_empty() {
            println!("  none found");
        }
        for (name, desc) in devs {
            println!("  {name:<32} {desc}");
            for line in capture::describe_device(&name) {
                println!("  {:<32}   {line}", "");
            }
        }
    } else {
        println!("capture devices: this build has no live capture (build with --features capture)");
    }
    println!("serial ports (for output.sink port):");
    match serialport::available_ports() {
        Ok(ports) if !ports.is_empty() => {
            for p in ports {
                println!("  {:<32} {:?}", p.port_name, p.port_type);
            }
        }
        Ok(_) => println!("  none found"),
        Err(e) => println!("  cannot list: {e}"),
    }
}
