//! Fair shares of the engine pool's places between devices.
//!
//! The pool has no queue of its own (engines batch continuously; an escalation is one HTTP
//! request, refused `Busy` at once when no worker has room), so there is no waiting request to
//! pick: fairness applies at admission instead. Each device's requests in flight are counted
//! (its sessions together, keyed by its verified identity) and, once the pool's places are at
//! least half taken, a device holding its share of them (`places / devices`) is refused `Busy`
//! first ([`crate::dispatch::fair::over_share`]), so one device cannot take every place and
//! the next places to free go to the others. An entry lives only while the device has a
//! request in flight, so the map is bounded by the pool's places.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::dispatch::fair::over_share;

/// Requests in flight per device.
#[derive(Debug, Default)]
pub struct DeviceSlots {
    held: Mutex<HashMap<Arc<str>, usize>>,
}

/// One request's place, counted as its device's until dropped.
#[derive(Debug)]
pub struct DeviceSlot {
    slots: Arc<DeviceSlots>,
    device: Arc<str>,
}

impl DeviceSlots {
    /// Count a request of `device` in flight, unless the device is over its share of
    /// `capacity` places of which `in_flight` are taken; `None` when it is.
    pub fn try_take(self: &Arc<Self>, device: &Arc<str>, in_flight: usize, capacity: usize) -> Option<DeviceSlot> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mine = held.get(device).copied().unwrap_or(0);
        let others = held.len() - usize::from(mine > 0);
        if over_share(mine, others, in_flight, capacity) {
            return None;
        }
        *held.entry(device.clone()).or_insert(0) += 1;
        Some(DeviceSlot { slots: self.clone(), device: device.clone() })
    }

    /// Devices with requests in flight.
    pub fn devices(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for DeviceSlot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.device) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.device);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flooding_device_is_refused_before_it_takes_a_light_devices_place() {
        let slots = Arc::new(DeviceSlots::default());
        let (flood, light) = (Arc::from("flood"), Arc::from("light"));
        let mut held = Vec::new();
        // 8 places: alone, the flood may take all but an eighth...
        for in_flight in 0..7 {
            held.push(slots.try_take(&flood, in_flight, 8).expect("its share is 7 places"));
        }
        assert!(slots.try_take(&flood, 7, 8).is_none(), "one place is kept for a device that comes");
        // ...and once a light device holds one, the flood's share is 4 of 8.
        let l = slots.try_take(&light, 7, 8).expect("the place kept");
        drop(l);
        drop(held.drain(..3));
        let l = slots.try_take(&light, 4, 8).expect("a light device is admitted");
        assert!(slots.try_take(&flood, 5, 8).is_none(), "the flood holds its share of a half-full pool");
        assert!(slots.try_take(&light, 5, 8).is_some(), "the light device is not over its share");
        drop(l);
        assert_eq!(slots.devices(), 1, "entries only while a device has a request in flight");
        drop(held);
        assert_eq!(slots.devices(), 0);
    }

    #[test]
    fn the_map_holds_only_devices_with_requests_in_flight() {
        let slots = Arc::new(DeviceSlots::default());
        for i in 0..10_000 {
            let d: Arc<str> = Arc::from(format!("device-{i}"));
            let s = slots.try_take(&d, 0, 64);
            assert!(s.is_some());
        }
        assert_eq!(slots.devices(), 0, "every place came back");
    }
}
