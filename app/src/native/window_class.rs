//! The X11 window's class: WM_CLASS = ("agentloom", "agentloom"). eframe gives winit the app
//! id as the class with an empty instance name, and desktops that match the instance (or
//! both) against the desktop entry's StartupWMClass then fail to group the window under the
//! app's icon. The property is written again before the window is first shown (eframe keeps
//! it hidden until its first frame), as ICCCM asks. Wayland takes the app id as it is, and
//! Windows and macOS have no such property.

/// Names the window `name` in both parts of its X11 class, when it is an X11 window.
#[cfg(target_os = "linux")]
pub fn name_x11_window(window: &impl raw_window_handle::HasWindowHandle, name: &str) {
    use raw_window_handle::RawWindowHandle;

    let Ok(handle) = window.window_handle() else {
        return;
    };
    let id = match handle.as_raw() {
        RawWindowHandle::Xlib(xlib) => u32::try_from(xlib.window).ok(),
        RawWindowHandle::Xcb(xcb) => Some(xcb.window.get()),
        _ => None,
    };
    if let Some(id) = id
        && let Err(err) = write_wm_class(id, name)
    {
        tracing::warn!(error = %err, "could not set the window's X11 class");
    }
}

#[cfg(target_os = "linux")]
fn write_wm_class(window: u32, name: &str) -> Result<(), Box<dyn std::error::Error>> {
    use x11rb::connection::Connection as _;
    use x11rb::protocol::xproto::{AtomEnum, PropMode};
    use x11rb::wrapper::ConnectionExt as _;

    // A connection of its own to the display the window is on (winit's is not shared).
    let (connection, _screen) = x11rb::connect(None)?;
    let class = format!("{name}\0{name}\0");
    connection
        .change_property8(
            PropMode::REPLACE,
            window,
            AtomEnum::WM_CLASS,
            AtomEnum::STRING,
            class.as_bytes(),
        )?
        .check()?;
    connection.flush()?;
    Ok(())
}

/// Windows and macOS: a window has no X11 class.
#[cfg(not(target_os = "linux"))]
pub fn name_x11_window(_window: &impl raw_window_handle::HasWindowHandle, _name: &str) {}
