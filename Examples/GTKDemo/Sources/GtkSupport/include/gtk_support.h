#ifndef ENTITYSTORE_GTK_SUPPORT_H
#define ENTITYSTORE_GTK_SUPPORT_H

#include <gtk/gtk.h>

G_BEGIN_DECLS

/// One row of the list: a section's header or an object's line. Its text is a property: a row changed in place
/// notifies it and the bound label follows (no items-changed for an edit, as GTK's list model validator wants).
#define ES_TYPE_ROW (es_row_get_type())
G_DECLARE_FINAL_TYPE(EsRow, es_row, ES, ROW, GObject)

EsRow *es_row_new(gboolean header, const char *text);
gboolean es_row_is_header(EsRow *row);
const char *es_row_get_text(EsRow *row);
void es_row_set_text(EsRow *row, const char *text);

/// The model's source, answered by the app: the number of rows, and the row at a position (a new reference).
typedef guint (*EsCountFunc)(void *context);
typedef EsRow *(*EsItemFunc)(void *context, guint position);

/// A GListModel whose rows are the app's (`count`, `item`): it keeps no rows of its own, and says what changed
/// only when told (es_flat_model_items_changed, after the app's rows changed).
#define ES_TYPE_FLAT_MODEL (es_flat_model_get_type())
G_DECLARE_FINAL_TYPE(EsFlatModel, es_flat_model, ES, FLAT_MODEL, GObject)

EsFlatModel *es_flat_model_new(EsCountFunc count, EsItemFunc item, void *context);
void es_flat_model_items_changed(EsFlatModel *model, guint position, guint removed, guint added);

/// A factory of rows: a label bound to the row's text, styled as a heading for a section's header.
GtkListItemFactory *es_row_factory_new(void);

/// Calls `visit` with each row a list view shows now (bound to a widget): its position as GTK's list item holds
/// it, the text its label shows, and whether it is styled as a header.
typedef void (*EsShownRowFunc)(void *context, guint position, const char *text, gboolean header);
void es_visit_shown_rows(EsShownRowFunc visit, void *context);
guint es_shown_row_count(void);

/// Runs the blocks of the main dispatch queue (Swift's main actor on Linux) from GLib's main loop.
void es_attach_main_queue(void);

/// Calls `signal_handler(instance, user_data)` on `signal` of `instance` (g_signal_connect is a macro).
gulong es_connect(gpointer instance, const char *signal, GCallback handler, gpointer user_data);

/// Emits a button's `clicked`, as a click does (gtk_widget_activate emits it a quarter second later).
void es_click(GtkWidget *button);

G_END_DECLS

#endif
