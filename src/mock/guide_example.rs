// The mock kit guide's example (`pulsar_sdk::mock::guide` shows this file): an application's
// own test, run against the mock broker through a broker restart and a pushed error.

use std::collections::BTreeSet;
use std::time::Duration;

use pulsar_sdk::mock::{MockBroker, MockError, MockRequest};
use pulsar_sdk::{Client, Consumer, Error, Producer, ServerError, SubscriptionType};

// ---- The application: a billing service. ----------------------------------------------------

/// Reads orders, writes one invoice per order, and acknowledges an order once its invoice is
/// stored (at-least-once: after a failure an order may be billed twice, never zero times).
async fn billing_service(client: Client) -> Result<(), Error> {
    let mut orders = client
        .consumer("orders")
        .subscription("billing")
        .subscription_type(SubscriptionType::Shared)
        .subscribe()
        .await?;
    let invoices = client.producer("invoices").create().await?;
    loop {
        let order = orders.recv().await?;
        let invoice = format!("invoice:{}", order.payload_str().unwrap_or("?"));
        invoices.send_and_wait(invoice).await?;
        orders.ack(&order)?;
    }
}

/// The application's configuration: only the service URL changes between production and tests.
fn connect(service_url: &str) -> Result<Client, Error> {
    Client::builder()
        .service_url(service_url)
        .operation_timeout(Duration::from_secs(10))
        .build()
}

// ---- The application's test, against the kit. ----------------------------------------------

/// The test's side: a shop sending orders and an accountant reading invoices.
struct World {
    shop: Producer,
    accounting: Consumer,
    billed: BTreeSet<String>,
}

impl World {
    async fn new(client: &Client) -> World {
        World {
            shop: client.producer("orders").create().await.unwrap(),
            accounting: client
                .consumer("invoices")
                .subscription("audit")
                .subscribe()
                .await
                .unwrap(),
            billed: BTreeSet::new(),
        }
    }

    /// Sends `orders` and waits until each one's invoice has arrived.
    async fn order_and_expect_invoices(&mut self, orders: &[&str]) {
        for order in orders {
            self.shop.send_and_wait(order.to_string()).await.unwrap();
        }
        while !orders
            .iter()
            .all(|o| self.billed.contains(&format!("invoice:{o}")))
        {
            let invoice = tokio::time::timeout(Duration::from_secs(10), self.accounting.recv())
                .await
                .expect("an invoice within 10 s")
                .unwrap();
            self.accounting.ack(&invoice).unwrap();
            self.billed
                .insert(invoice.payload_str().unwrap_or_default().to_owned());
        }
    }
}

#[tokio::test]
async fn billing_survives_a_broker_restart_and_a_storage_error() {
    // One call starts the kit on 127.0.0.1; dropping `broker` at the end stops it.
    let broker = MockBroker::start().await.expect("mock broker");
    let url = broker.service_url();
    let service = billing_service(connect(&url).unwrap());

    let script = async {
        let client = connect(&url).unwrap();
        let mut world = World::new(&client).await;
        world.order_and_expect_invoices(&["o1", "o2"]).await;

        // The broker restarts: every connection drops, the data stays; all reconnect.
        broker.restart().await.unwrap();
        world.order_and_expect_invoices(&["o3"]).await;

        // The next write of an invoice fails in the broker's storage (a retriable error): the
        // service's producer sends it again and the order is still billed.
        broker.push_error(
            MockError::new(
                MockRequest::Send,
                ServerError::PersistenceError,
                "bookie lost",
            )
            .on_topic("invoices"),
        );
        world.order_and_expect_invoices(&["o4"]).await;
        assert_eq!(broker.consumed_errors().len(), 1, "the error was hit");
    };

    // The service runs beside the test's script (in the same task) until the script is done.
    tokio::select! {
        stopped = service => panic!("the service stopped: {stopped:?}"),
        () = script => {}
    }
}
