-- A small shop: customers (with an avatar BLOB), products, orders and their items.
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL, avatar BLOB);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price_cents INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), placed_at TEXT NOT NULL);
CREATE TABLE order_items (order_id INTEGER NOT NULL REFERENCES orders(id), product_id INTEGER NOT NULL REFERENCES products(id), quantity INTEGER NOT NULL);

INSERT INTO customers VALUES
  (1, 'Ada Lovelace', 'ada@example.com', X'89504E470D0A1A0A'),
  (2, 'Grace Hopper', 'grace@example.com', X'FFD8FFE0'),
  (3, 'Alan Turing', 'alan@example.com', NULL),
  (4, 'Katherine Johnson', 'katherine@example.com', X'47494638');

INSERT INTO products VALUES
  (1, 'Analytical Engine manual', 4200),
  (2, 'Compiler handbook', 3100),
  (3, 'Slide rule', 1550),
  (4, 'Punch cards (box)', 800);

INSERT INTO orders VALUES
  (1, 1, '2026-11-02'), (2, 1, '2026-11-20'), (3, 2, '2026-11-05'),
  (4, 3, '2026-11-09'), (5, 4, '2026-11-11'), (6, 4, '2026-11-28');

INSERT INTO order_items VALUES
  (1, 1, 2), (1, 4, 3), (2, 3, 1),
  (3, 2, 4), (3, 4, 1),
  (4, 3, 2),
  (5, 1, 1), (5, 2, 1), (6, 4, 5);
